"""Both adapters with a target on a (fake) vLLM server: `target="http://..."` + `target_model`
load the draft here and reach the target over HTTP; token counting reads the local tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard_core.remote.target import RemoteTarget
from tests.specguard_core.remote.vllm_helpers import served_target

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from llama_index.core.llms import ChatMessage  # noqa: E402

from specguard_integrations.langchain import ChatSpecGuard  # noqa: E402
from specguard_integrations.llama_index import SpecGuardLLM  # noqa: E402


def test_both_adapters_take_a_target_url(pair_dirs: tuple[Path, Path]) -> None:
    draft, target = pair_dirs
    common = dict(draft=str(draft), target_model="served", target_tokenizer=str(target),
                  device="cpu", dtype="float32", temperature=0.0, k=1, max_tokens=8)
    with served_target(target) as url:
        chat = ChatSpecGuard(target=url, **common)
        assert chat.get_num_tokens("hello world") > 0  # the local tokenizer, nothing loaded
        message = chat.invoke("What is 3 + 4?")
        assert isinstance(chat.engine.target, RemoteTarget)
        assert message.response_metadata["model_name"] == "specguard:draft+served"
        llm = SpecGuardLLM(target=url, **common)
        reply = llm.chat([ChatMessage(role="user", content="What is 3 + 4?")])
        assert isinstance(llm.engine.target, RemoteTarget)
        assert reply.message.content == message.content  # same greedy pair, same text


def test_the_target_api_key_never_shows() -> None:
    """A served target's key is a secret: not in repr/str/dumps of either adapter."""
    for cls in (ChatSpecGuard, SpecGuardLLM):
        model = cls(draft="qwen0.5b", target="http://127.0.0.1:9/v1", target_model="m",
                    target_api_key="sk-SECRET-42")
        assert "sk-SECRET-42" not in repr(model) and "sk-SECRET-42" not in str(model)
        assert "sk-SECRET-42" not in str(model.model_dump())


def test_a_target_placement_option_with_a_served_target_fails_at_construction() -> None:
    for cls in (ChatSpecGuard, SpecGuardLLM):
        with pytest.raises(ValueError, match=r"target_dtype places an in-process target"):
            cls(draft="qwen0.5b", target="http://127.0.0.1:9/v1", target_dtype="float32")
