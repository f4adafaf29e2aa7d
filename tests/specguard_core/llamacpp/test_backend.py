"""The llama.cpp backend's contract, on tiny random GGUF models: the lossless default writes what
llama.cpp's own greedy decoding writes, token for token; rollback leaves every cache at its
committed tokens; tool calls and strict grammars hold; what llama.cpp cannot give is refused up
front; a missing binding is one clear error.

Both sides keep their KV cache in float32 here: with llama.cpp's float16 cache a prefill and
one-token forwards round differently (about 2e-3 on these logits), which flips a near-tie now and
then, as bf16 does on transformers; float32 leaves the comparison to the algorithm."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard_core import SpecGuardEngine
from specguard_core.config import EngineConfig
from specguard_core.llamacpp.context import LlamaContext
from specguard_core.llamacpp.handle import LlamaCppHandle
from specguard_core.text.errors import InputError
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.llamacpp.gguf_models import gguf_pair, needs_llama_cpp

pytestmark = needs_llama_cpp

PROMPTS = [
    "What is 3 + 4? Please reason step by step.",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat.",
    "Ünïcödé ☃ 日本語 test, then list 1. 2. 3.",
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return f(x) + f(x)\n\nExplain g.",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    root = tmp_path_factory.mktemp("gguf")
    pair = noisy_copy_pair(root / "hf")
    return (*gguf_pair(root, pair), pair[1])


@pytest.fixture(scope="module")
def engine(files: tuple[Path, Path, Any]) -> SpecGuardEngine:
    draft, target = (LlamaCppHandle(LlamaContext(f, n_ctx=512, threads=1, f32_cache=True),
                                    files[2], name)
                     for f, name in zip(files, ("draft", "target"), strict=False))
    return SpecGuardEngine(draft, files[2], target, files[2])


def test_from_pretrained_loads_gguf_files_with_their_tokenizer(
        files: tuple[Path, Path, Any], engine: SpecGuardEngine) -> None:
    loaded = SpecGuardEngine.from_pretrained(str(files[0]), str(files[1]), backend="llama.cpp",
                                             context_size=512, progress=False)
    assert type(loaded.target).__name__ == "LlamaCppHandle" and loaded.target.context_window == 512
    tokenizer = loaded.target.tokenizer  # transformers read it from the GGUF: same ids, template
    assert tokenizer.get_vocab() == files[2].get_vocab()
    assert tokenizer.chat_template == files[2].chat_template
    assert loaded.generate(PROMPTS[0], max_new_tokens=12).usage.completion_tokens > 0


def test_a_cached_model_is_named_by_its_bundle_not_its_file(
        files: tuple[Path, Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached GGUF is always `model.gguf`: the engine's name comes from the registry's."""
    from types import SimpleNamespace

    from specguard_core.llamacpp import load

    bundles = {"tiny-draft": (SimpleNamespace(name="tiny-draft"), files[0]),
               "tiny-target": (SimpleNamespace(name="tiny-target"), files[1])}
    monkeypatch.setattr(load, "lookup", lambda ref: bundles.get(ref, (None,))[0])
    monkeypatch.setattr(load, "gguf_path", lambda b: bundles[b.name][1])
    monkeypatch.setattr(load, "cached_folder", lambda b: None)  # the tokenizer from the GGUF
    loaded = SpecGuardEngine.from_pretrained("tiny-draft", "tiny-target", backend="llama.cpp",
                                             context_size=256, progress=False)
    assert loaded.model_name == "specguard:tiny-draft+tiny-target"
    by_path = SpecGuardEngine.from_pretrained(str(files[0]), str(files[1]), backend="llama.cpp",
                                              context_size=256, progress=False)
    assert by_path.model_name == f"specguard:{files[0].stem}+{files[1].stem}"


def llama_greedy(path: Path, prompt: list[int], n: int, eos: frozenset[int]) -> list[int]:
    """llama.cpp alone: the binding's own greedy decoding of `prompt` (at most `n` tokens, an
    end-of-turn token included)."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=1, verbose=False,
                          use_extra_bufts=False,  # as the engine's (context.py)
                          type_k=0, type_v=0, flash_attn=False)  # float32, as the engine here
    out: list[int] = []
    for tok in llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0):
        out.append(int(tok))
        if tok in eos or len(out) >= n:
            break
    return out


def ids_of(result: Any) -> list[int]:
    return [t for s in result.steps for t in s.token_ids]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("budget", [5, 60])
def test_the_default_is_llama_cpps_own_greedy_text(engine: SpecGuardEngine,
                                                   files: tuple[Path, Path, Any], prompt: str,
                                                   budget: int) -> None:
    result = engine.generate(prompt, max_new_tokens=budget)
    assert result.plan["check"] == "growing" and result.plan["step_rule"] == "exact"
    want = llama_greedy(files[1], engine.prompt_ids(prompt), budget, engine.target.eos_ids)
    got = ids_of(result)
    assert got == want[: len(got)]
    if len(got) < len(want):  # the budget ended inside a character: never sent half of it
        assert result.finish_reason == "length" and len(want) == budget
        assert "\ufffd" in engine.target.decode(want[len(got) - len(want) - 3:])
    else:
        assert result.finish_reason == ("stop" if want[-1] in engine.target.eos_ids
                                        else "length")


def test_the_guesses_default_to_what_pays_on_the_backend(engine: SpecGuardEngine) -> None:
    """`draft_lookahead=None` is the draft's backend's measured default: 3 on llama.cpp (8 on
    transformers), and a value given wins."""
    assert engine.generate(PROMPTS[0], max_new_tokens=4).plan["guesses"] == 3
    assert engine.generate(PROMPTS[0], max_new_tokens=4, draft_lookahead=6).plan["guesses"] == 6


def test_every_path_of_the_default_ran(tmp_path: Path) -> None:
    """Both outcomes of the check run on llama.cpp and stay its greedy text: a step kept whole,
    and a refused one finished by the speculative fallback (a draft close to its target, short
    steps, so some pass whole)."""
    pair = noisy_copy_pair(tmp_path / "hf", noise=0.005)
    files = gguf_pair(tmp_path, pair)
    draft, target = (LlamaCppHandle(LlamaContext(f, n_ctx=512, threads=1, f32_cache=True),
                                    pair[1]) for f in files)
    engine = SpecGuardEngine(draft, pair[1], target, pair[1])
    for prompt in PROMPTS[1:3]:
        result = engine.generate(prompt, max_new_tokens=60, max_step_tokens=6)
        assert {s.path for s in result.steps} == {"target-checked", "target-verified"}
        want = llama_greedy(files[1], engine.prompt_ids(prompt), 60, target.eos_ids)
        assert ids_of(result) == want[: len(ids_of(result))]


def test_a_stop_string_cuts_the_greedy_text(engine: SpecGuardEngine) -> None:
    full = engine.generate(PROMPTS[1], max_new_tokens=40).raw_text
    stop = full[10:14]
    cut = engine.generate(PROMPTS[1], max_new_tokens=40, stop=[stop])
    assert cut.raw_text == full.split(stop, 1)[0] and cut.finish_reason == "stop"


def test_rollback_leaves_the_cache_at_its_committed_tokens(engine: SpecGuardEngine) -> None:
    """Forks, tentative passes, kept prefixes and rollbacks: llama.cpp's cache holds exactly the
    committed positions, and the next logits equal a fresh encoding's."""
    target = engine.target
    ids = engine.prompt_ids(PROMPTS[0])
    state = target.new_state()
    target.extend(state, ids)
    tpass = target.try_tokens(state, [5, 6, 7, 8])
    tpass.keep(2)
    assert state.ids == ids + [5, 6] and _held(target, state) == len(ids) + 2
    target.fork(state, 3)
    target.forward(state, torch.tensor([[9], [10], [11]]))
    target.commit_row(state, 2, [11], None)
    assert state.ids == ids + [5, 6, 11] and _held(target, state) == len(ids) + 3
    target.rollback(state, len(ids) + 1)
    fresh = target.new_state()
    target.extend(fresh, ids + [5])
    assert torch.allclose(target.next_logits(state), target.next_logits(fresh), atol=1e-4)
    assert _held(target, state) == _held(target, fresh) == len(ids) + 1


def _held(handle: Any, state: Any) -> int:
    """Positions llama.cpp's cache holds for the state's own sequence (its max position + 1)."""
    ctx = handle.ctx
    return int(ctx.lib.llama_memory_seq_pos_max(ctx.memory, state.cache.ids[0])) + 1


def test_sequences_are_returned_when_a_request_ends(engine: SpecGuardEngine) -> None:
    free = len(engine.target.ctx._free)
    for _ in range(3):
        engine.generate(PROMPTS[0], max_new_tokens=8, k=3, temperature=0.7)
    import gc

    gc.collect()
    assert len(engine.target.ctx._free) == free


def test_strict_json_and_strict_tool_calls_hold(engine: SpecGuardEngine) -> None:
    """A random model writes what the grammar lets through: closed choices end the text."""
    schema = {"type": "object", "properties": {"answer": {"type": "boolean"}},
              "required": ["answer"], "additionalProperties": False}
    result = engine.generate("Answer in JSON.", max_new_tokens=40, response_format={
        "type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}})
    assert set(json.loads(result.text)) == {"answer"}
    city = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
            "required": ["city"], "additionalProperties": False}
    tool = {"type": "function", "function": {"name": "get_weather", "strict": True,
                                             "parameters": city}}
    called = engine.generate("Weather in Paris?", tools=[tool], tool_choice="required",
                             max_new_tokens=60)
    assert called.tool_calls and called.tool_calls[0].name == "get_weather"
    assert called.tool_calls[0].arguments["city"] in ("Paris", "Rome")


def test_what_llama_cpp_cannot_give_is_refused_up_front(engine: SpecGuardEngine,
                                                        files: tuple[Path, Path, Any]) -> None:
    with pytest.raises(InputError, match="attention rows, which the llama.cpp backend"):
        engine.generate("x", route="score", beta=0.5, verifier="paper")
    with pytest.raises(InputError, match="middle-layer hidden states.*llama.cpp"):
        engine.generate("x", verifier="/some/card.json")
    with pytest.raises(InputError, match="batching"):
        SpecGuardEngine(engine.draft, engine.draft.tokenizer, engine.target,
                        engine.target.tokenizer, engine_config=EngineConfig(batching=True))
    with pytest.raises(ValueError, match="llama.cpp backend runs on the CPU"):
        SpecGuardEngine.from_pretrained(str(files[0]), str(files[1]), backend="llama.cpp",
                                        device="cuda")
    with pytest.raises(ValueError, match="dtype applies to the transformers backend"):
        SpecGuardEngine.from_pretrained(str(files[0]), str(files[1]), backend="llama.cpp",
                                        dtype="float32")
    with pytest.raises(OSError, match="loads GGUF files"):
        SpecGuardEngine.from_pretrained("some/hub-id", str(files[1]), backend="llama.cpp")


def test_confidence_scoring_and_the_fast_preset_run(engine: SpecGuardEngine) -> None:
    fast = engine.generate(PROMPTS[0], max_new_tokens=24, route="score", tau=0.5, beta=1.0)
    assert fast.verifier == "paper" and all(s.confidence is not None for s in fast.steps)
    paths = {s.path for s in fast.steps}
    assert paths and paths <= {"kept", "target-checked", "target-verified", "regenerated"}


def test_a_missing_binding_is_one_error_with_the_install_line(
        monkeypatch: pytest.MonkeyPatch, files: tuple[Path, Path, Any]) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[llamacpp\]"'):
        SpecGuardEngine.from_pretrained(str(files[0]), str(files[1]), backend="llama.cpp")
