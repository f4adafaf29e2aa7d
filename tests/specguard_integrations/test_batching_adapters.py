"""Both adapters' concurrent entry points (LangChain `batch`, LlamaIndex `achat` under
`asyncio.gather`) go through the batching scheduler of an engine built with
`EngineConfig(batching=True)`, and answer exactly as serial calls do (float32 tiny models)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_integrations.langchain import ChatSpecGuard
from specguard_integrations.llama_index import SpecGuardLLM
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=24, max_step_tokens=8,
                      fallback="speculative", tau=math.inf)
PROMPTS = [f"Question {i}: what is {i} + {2 * i + 3}?" * (1 + i % 3) for i in range(6)]


def test_adapters_concurrent_calls_share_forwards(tmp_path: Path) -> None:
    pair = noisy_copy_pair(tmp_path)
    serial = SpecGuardEngine(*pair, config=CFG)
    batched = SpecGuardEngine(*pair, config=CFG, engine_config=EngineConfig(batching=True))
    assert batched.batcher is not None

    want = [ChatSpecGuard(engine=serial).invoke(p).content for p in PROMPTS]
    got = ChatSpecGuard(engine=batched).batch(PROMPTS, config={"max_concurrency": 6})
    assert [m.content for m in got] == want
    stats = batched.batcher.stats
    assert stats.batched_forwards > 0 and stats.max_active >= 2
    before = stats.batched_forwards

    def ask(prompt: str) -> list[ChatMessage]:
        return [ChatMessage(role="user", content=prompt)]

    serial_llm, batched_llm = SpecGuardLLM(engine=serial), SpecGuardLLM(engine=batched)
    want_li = [serial_llm.chat(ask(p)).message.content for p in PROMPTS]

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*[batched_llm.achat(ask(p)) for p in PROMPTS]))

    assert [r.message.content for r in asyncio.run(gather())] == want_li
    assert batched.batcher.stats.batched_forwards > before and batched.batcher.active == 0
