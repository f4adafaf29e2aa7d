"""The bench's baselines on the llama.cpp backend (tiny random GGUF models): llama.cpp alone and
the project's own token-level SD both write llama.cpp's greedy text, as the lossless default
does, through the bench's own `run_method`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_bench.common.backend_baselines import llama_greedy, token_sd
from specguard_bench.common.methods import run_method
from specguard_core import SpecGuardEngine
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.llamacpp.gguf_models import gguf_pair, needs_llama_cpp

pytestmark = needs_llama_cpp

PROMPTS = ["What is 3 + 4? Please reason step by step.",
           "Repeat after me: the cat sat on the mat, the cat sat on the mat."]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> SpecGuardEngine:
    from specguard_core.llamacpp.context import LlamaContext
    from specguard_core.llamacpp.handle import LlamaCppHandle

    root = tmp_path_factory.mktemp("gguf")
    pair = noisy_copy_pair(root / "hf")
    files: tuple[Path, Path] = gguf_pair(root, pair)
    draft, target = (LlamaCppHandle(LlamaContext(f, n_ctx=512, threads=1, f32_cache=True),
                                    pair[1]) for f in files)
    return SpecGuardEngine(draft, pair[1], target, pair[1])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_token_sd_and_the_default_write_llama_cpps_greedy_text(engine: SpecGuardEngine,
                                                               prompt: str) -> None:
    ids = engine.prompt_ids(prompt)
    alone = llama_greedy(engine.target, ids, 50)
    assert token_sd(engine.draft, engine.target, ids, 50) == alone
    assert len(alone) == 50 or alone[-1] in engine.target.eos_ids
    messages: Any = [{"role": "user", "content": prompt}]
    outs = {m: run_method(engine, m, messages, max_new_tokens=50)
            for m in ("target", "token-sd", "specguard-balanced")}
    assert outs["target"].text == outs["token-sd"].text == \
        engine.target.tokenizer.decode(alone, skip_special_tokens=True)
    assert outs["specguard-balanced"].new_tokens == outs["target"].new_tokens
    draft = run_method(engine, "draft", messages, max_new_tokens=50)
    assert draft.new_tokens == len(llama_greedy(engine.draft, ids, 50))


def test_the_baselines_return_their_sequences(engine: SpecGuardEngine) -> None:
    free = len(engine.target.ctx._free)
    llama_greedy(engine.target, engine.prompt_ids(PROMPTS[0]), 5)
    assert len(engine.target.ctx._free) == free
