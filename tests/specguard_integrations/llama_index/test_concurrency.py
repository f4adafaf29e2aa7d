"""Concurrent `achat` calls on one engine give exactly the serial results (greedy decoding).

Uses tiny random transformers models (real KV caches, attention capture, target fallback), so the
engine's per-request state is exercised, not a script.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_integrations.llama_index import SpecGuardLLM

PROMPTS = [f"Question {i}: what is {i} + {i + 3}?" for i in range(8)]
# odd requests never accept a draft step (per-call override), so the target writes them
OPTIONS: list[dict[str, Any]] = [{"tau": float("inf")} if i % 2 else {} for i in range(8)]


@pytest.fixture(scope="module")
def llm(tiny_pair: tuple[Any, Any, Any, Any]) -> SpecGuardLLM:
    draft, draft_tok, target, target_tok = tiny_pair
    config = SpecGuardConfig(k=2, temperature=0.0, max_new_tokens=8, max_step_tokens=4, tau=0.5)
    return SpecGuardLLM(engine=SpecGuardEngine(draft, draft_tok, target, target_tok,
                                               config=config))


def _key(response: ChatResponse) -> tuple[Any, ...]:
    steps = response.additional_kwargs["specguard"]["steps"]
    raw = response.raw or {}
    return (response.message.content, raw["usage"],
            [(s["source"], s["text"], s["tokens"]) for s in steps])


def _messages(prompt: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=prompt)]


def test_concurrent_achat_equals_serial(llm: SpecGuardLLM) -> None:
    serial = [_key(llm.chat(_messages(p), **o)) for p, o in zip(PROMPTS, OPTIONS, strict=True)]
    assert len({str(k) for k in serial}) > 1  # the prompts really differ
    sources = {s[0] for k in serial for s in k[2]}
    assert sources == {"draft", "target"}

    async def together() -> list[ChatResponse]:
        calls = (llm.achat(_messages(p), **o) for p, o in zip(PROMPTS, OPTIONS, strict=True))
        return list(await asyncio.gather(*calls))

    assert [_key(r) for r in asyncio.run(together())] == serial

    # and mixed: chats, streams and calls from other threads, all at once
    async def mixed() -> list[ChatResponse]:
        async def streamed(prompt: str, options: dict[str, Any]) -> ChatResponse:
            chunks = [c async for c in await llm.astream_chat(_messages(prompt), **options)]
            return chunks[-1]  # completed in place with the finished call

        calls = [streamed(p, o) if i % 3 else llm.achat(_messages(p), **o)
                 for i, (p, o) in enumerate(zip(PROMPTS, OPTIONS, strict=True))]
        return list(await asyncio.gather(*calls))

    from_threads: list[Any] = [None] * len(PROMPTS)

    def in_thread(i: int) -> None:
        from_threads[i] = _key(llm.chat(_messages(PROMPTS[i]), **OPTIONS[i]))

    threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    mixed_results = asyncio.run(mixed())
    for t in threads:
        t.join()
    assert [_key(r) for r in mixed_results] == serial
    assert from_threads == serial
