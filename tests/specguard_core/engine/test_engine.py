"""The engine on tiny random models: exactness at the extremes, no re-encoding, stops, errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import build_tokenizer
from specguard_core.text.chat import InputError
from specguard_core.text.errors import PromptTooLong
from specguard_core.types import GenerationResult
from tests.fixtures import build_model

QUESTION = "What is 3 + 4? Please reason step by step."
GREEDY = dict(k=1, temperature=0.0, max_new_tokens=48, max_step_tokens=12)


@pytest.fixture(scope="module")
def engine(tiny_pair_on: tuple[Any, Any, Any, Any]) -> SpecGuardEngine:
    """The tiny pair on each test device (`device` in conftest)."""
    return SpecGuardEngine(*tiny_pair_on, config=SpecGuardConfig(**GREEDY))


def all_ids(result: GenerationResult) -> list[int]:
    return [t for s in result.steps for t in s.token_ids]


def reference(model: Any, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=n,
                         do_sample=False)
    return list(out[0, len(prompt):].tolist())


def test_always_accept_is_draft_greedy(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, tau=-math.inf)
    assert all_ids(result) == reference(engine.draft.model, engine.prompt_ids(QUESTION), 48)
    assert all(s.source == "draft" for s in result.steps)
    assert result.stats.target.decoded == 0
    assert len(result.steps) >= 4  # steps of at most 12 tokens: the loop really ran step by step


def test_always_reject_is_target_greedy(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, tau=math.inf)
    assert all_ids(result) == reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    assert all(s.source == "target" and not s.accepted for s in result.steps)
    assert result.stats.target_token_fraction == 1.0


def _mixed(engine: SpecGuardEngine) -> GenerationResult:
    scores = [s.score for s in engine.generate(QUESTION, tau=-math.inf).steps]
    tau = sorted(s for s in scores if s is not None)[len(scores) // 2]
    result = engine.generate(QUESTION, tau=tau)
    assert {s.source for s in result.steps} == {"draft", "target"}, "need a mixed run"
    return result


def _non_eos(engine: SpecGuardEngine, ids: list[int]) -> int:
    return len([t for t in ids if t not in engine.target.eos_ids])


def test_no_context_is_ever_reencoded(engine: SpecGuardEngine) -> None:
    result = _mixed(engine)
    steps, prompt = result.steps, result.usage.prompt_tokens
    last_target = max(i for i, s in enumerate(steps) if s.source == "target")
    # the target encoded each token once: the prompt and the draft's steps by catch-up prefill,
    # its own steps by decoding; nothing after its last step, and nothing twice
    before = sum(_non_eos(engine, s.token_ids) for s in steps[:last_target] if s.source == "draft")
    own = sum(_non_eos(engine, s.token_ids) for s in steps if s.source == "target")
    assert result.stats.target.prefilled == prompt + before
    assert result.stats.target.decoded == own
    # the draft prefilled the prompt and the target's steps (that it needed to go on), only once
    caught_up = sum(_non_eos(engine, s.token_ids) for s in steps[:-1] if s.source == "target")
    assert result.stats.draft.prefilled == prompt + caught_up


def test_mixed_run_is_deterministic_and_counts_add_up(engine: SpecGuardEngine) -> None:
    a, b = _mixed(engine), _mixed(engine)
    assert all_ids(a) == all_ids(b)
    s = a.stats
    assert s.steps == len(a.steps) == s.steps_accepted + s.steps_regenerated
    assert s.draft_tokens + s.target_tokens == a.usage.completion_tokens == len(all_ids(a))
    assert 0 < s.acceptance_rate < 1


def test_batched_candidates_reuse_the_prefix(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, k=4, temperature=0.7, tau=-math.inf, max_new_tokens=24)
    assert all(s.n_candidates == 4 for s in result.steps)
    # the prompt is prefilled once for all four candidates; candidates are decoded as a batch
    assert result.stats.draft.prefilled == result.usage.prompt_tokens
    assert result.stats.draft.decoded % 4 == 0
    assert result.stats.draft.forward_calls < result.stats.draft.decoded


def test_sampling_is_seeded(engine: SpecGuardEngine) -> None:
    run = dict(k=3, temperature=1.0, tau=0.5, max_new_tokens=24)
    assert all_ids(engine.generate(QUESTION, seed=7, **run)) == \
        all_ids(engine.generate(QUESTION, seed=7, **run))


def test_target_scoring_and_sample_fallback_run(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, experimental={"scoring_model": "target"},
                             fallback="sample", fallback_k=3, k=2, temperature=0.7, tau=0.5,
                             max_new_tokens=24)
    assert result.usage.completion_tokens == 24
    assert all(s.confidence is not None and s.grounding is not None for s in result.steps)


def test_max_new_tokens_stops_with_length(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, max_new_tokens=17)
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == 17


def test_max_steps(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, max_steps=2)
    assert len(result.steps) == 2 and result.finish_reason == "max_steps"


def test_stop_string_ends_the_text(engine: SpecGuardEngine) -> None:
    full = engine.generate(QUESTION, tau=-math.inf).raw_text
    stop = full[20:23]
    result = engine.generate(QUESTION, tau=-math.inf, stop=(stop,))
    assert result.finish_reason == "stop"
    assert stop not in result.raw_text and full.startswith(result.raw_text)
    assert result.raw_text == full[: full.index(stop)]


def test_eos_stops_with_stop() -> None:
    from specguard_core.testing import scripted_engine

    result = scripted_engine(lambda prompt: "Seven.\n\nDone.").generate("hi")
    assert result.finish_reason == "stop" and result.text == "Seven.\n\nDone."


def test_stream_yields_each_step_and_result(engine: SpecGuardEngine) -> None:
    stream = engine.stream(QUESTION)
    records = list(stream)
    assert [r.index for r in records] == list(range(len(records)))
    assert stream.result.steps == records


def test_closing_a_stream_frees_the_engine(engine: SpecGuardEngine) -> None:
    stream = engine.stream(QUESTION)
    next(stream)
    stream.close()
    assert engine.generate(QUESTION, max_new_tokens=5).usage.completion_tokens == 5


def test_calibrate_fits_and_saves_bounds(engine: SpecGuardEngine, tmp_path: Path) -> None:
    bounds = engine.calibrate([QUESTION, "Name three colours."], path=str(tmp_path / "b.json"),
                              max_new_tokens=24)
    assert bounds.confidence_min < bounds.confidence_max <= 0.0
    assert 0.0 <= bounds.grounding_min < bounds.grounding_max <= 1.0 + 1e-3
    from specguard_core.config import NormBounds

    assert NormBounds.load(tmp_path / "b.json") == bounds


def test_beta_one_skips_attention_capture(engine: SpecGuardEngine,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard_core.engine import proposer
    from specguard_core.engine.verify import verifier

    made: list[object] = []
    real = proposer.AttentionRecorder

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(proposer, "AttentionRecorder", counting)
    monkeypatch.setattr(verifier, "AttentionRecorder", counting)
    run = dict(k=2, temperature=0.7, tau=-math.inf, seed=3, max_new_tokens=24)
    with_capture = engine.generate(QUESTION, beta=0.3, **run)
    assert made and all(s.grounding is not None for s in with_capture.steps)
    made.clear()
    without = engine.generate(QUESTION, beta=1.0, **run)
    assert made == []  # no attention rows were captured
    assert without.raw_text == with_capture.raw_text  # capture never changes what is generated
    assert all(s.grounding is None and s.score is not None for s in without.steps)
    target_scored = engine.generate(QUESTION, beta=1.0, experimental={"scoring_model": "target"}, **run)
    assert made == [] and all(s.grounding is None for s in target_scored.steps)
    bounds = engine.calibrate([QUESTION], beta=1.0, max_new_tokens=24)
    assert bounds.confidence_min < bounds.confidence_max
    with pytest.raises(ValueError, match="beta"):
        verifier.decide_route(verifier.Scores(-1.0, None),
                              SpecGuardConfig(beta=0.5, verifier="paper"))


# ---- bad input ----------------------------------------------------------------------------
def test_empty_messages(engine: SpecGuardEngine) -> None:
    with pytest.raises(InputError, match="messages is empty"):
        engine.generate([])
    with pytest.raises(InputError, match="prompt is empty"):
        engine.generate("  ")


def test_prompt_longer_than_context_window(engine: SpecGuardEngine) -> None:
    with pytest.raises(PromptTooLong, match="context window is 512") as overflow:
        engine.generate("three four " * 400)
    assert isinstance(overflow.value, InputError)  # what a server or an adapter maps
    assert overflow.value.context_window == 512 and overflow.value.prompt_tokens > 512


def test_missing_model_path() -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SpecGuardEngine.from_pretrained("./no/such/model", "./no/such/model", progress=False)


def test_mismatched_vocabularies(tmp_path: Path, tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    draft, draft_tok, _, _ = tiny_pair
    other_tok = build_tokenizer(tmp_path / "tok", vocab_size=300)
    other = build_model(tmp_path / "m", len(other_tok), seed=3, layers=2, hidden=32,
                        eos=other_tok.eos_token_id)
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(other)
    with pytest.raises(InputError, match="different vocabularies"):
        SpecGuardEngine(draft, draft_tok, target, other_tok)
    hetero = SpecGuardEngine(draft, draft_tok, target, other_tok,
                             config=SpecGuardConfig(**GREEDY),
                             engine_config=EngineConfig(heterogeneous=True))
    with pytest.raises(ValueError, match="engine setting"):
        hetero.generate(QUESTION, heterogeneous=False)
    result = hetero.generate(QUESTION, tau=0.5, max_new_tokens=20)
    assert result.usage.completion_tokens >= 20


def test_balanced_is_the_default_wherever_no_config_is_given(tiny_pair: Any) -> None:
    from specguard_core.config import DEFAULT_PRESET, default_config, preset

    assert DEFAULT_PRESET == "balanced" and default_config() == preset("balanced")
    assert SpecGuardEngine(*tiny_pair).config == preset("balanced")
    # what the tuning chose (benchmarks/RESULTS.md): checked as the draft writes, every 16 tokens,
    # and the fallback's draft runs end on the product of the draft's probabilities
    cfg = preset("balanced")
    assert (cfg.check_tokens, cfg.sd_run_confidence, cfg.fallback) == (16, 0.7, "speculative")


def test_bad_config_values() -> None:
    with pytest.raises(ValueError):
        SpecGuardConfig(k=0)
    with pytest.raises(ValueError):
        SpecGuardConfig().merged(top_p=1.5)
    with pytest.raises(ValueError, match="unknown preset"):
        from specguard_core import preset

        preset("slow")


def test_close_from_another_thread_releases_the_engine(engine: SpecGuardEngine) -> None:
    import threading

    stream = engine.stream(QUESTION)
    first = threading.Event()

    def consume() -> None:
        for _ in stream:
            first.set()

    worker = threading.Thread(target=consume)
    worker.start()
    first.wait(timeout=30)
    stream.close()  # another thread may be inside next() right now
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert engine._turns._lock.acquire(timeout=5)
    engine._turns._lock.release()
