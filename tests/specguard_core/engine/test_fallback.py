"""The speculative fallback on tiny random models: greedy exactness, no re-encoding, cancelling."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.cache.state import Forward
from specguard_core.decoding.sampling import Shaping
from tests.fixtures import on_device
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import GREEDY, QUESTION, all_ids, reference

SD = dict(GREEDY, fallback="speculative")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, device: str) -> SpecGuardEngine:
    """A pair that partly disagrees (the conftest `tiny_pair` repeats one token from both models),
    on each test device."""
    pair = on_device(noisy_copy_pair(tmp_path_factory.mktemp(f"noisy-{device}")), device)
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**SD))


def test_tiny_pair_exactness(tiny_pair_on: tuple[Any, Any, Any, Any]) -> None:
    eng = SpecGuardEngine(*tiny_pair_on, config=SpecGuardConfig(**SD))
    prompt = eng.prompt_ids(QUESTION)
    assert all_ids(eng.generate(QUESTION, tau=math.inf)) == reference(eng.target.model, prompt, 48)
    assert all_ids(eng.generate(QUESTION, tau=-math.inf)) == reference(eng.draft.model, prompt, 48)


def test_always_reject_is_target_greedy_token_for_token(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, tau=math.inf)
    assert all_ids(result) == reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    assert all(s.path == "target-verified" and s.source == "target" for s in result.steps)
    assert reference(engine.draft.model, engine.prompt_ids(QUESTION), 48) != all_ids(result)
    s = result.stats
    assert s.steps_target_verified == s.steps == s.steps_regenerated
    assert 0 < s.draft_tokens < s.target_tokens  # the target kept some draft tokens, not all
    # verification passes replace per-token decoding: the target never decodes a token alone
    assert s.target.decoded <= len(result.steps)
    assert s.target_forward_passes == s.target.forward_calls
    assert s.tokens_per_target_forward is not None and s.tokens_per_target_forward > 0


def test_always_accept_is_draft_greedy(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, tau=-math.inf)
    assert all_ids(result) == reference(engine.draft.model, engine.prompt_ids(QUESTION), 48)
    assert all(s.path == "kept" for s in result.steps)
    assert result.stats.target.forward_calls == 0


@pytest.mark.parametrize("mixed", [False, True])
def test_caches_never_reencode(engine: SpecGuardEngine, mixed: bool) -> None:
    tau = math.inf
    if mixed:  # the median draft score: some steps kept, some through the fallback
        scores = sorted(s.score for s in engine.generate(QUESTION, tau=-math.inf).steps
                        if s.score is not None)
        tau = scores[len(scores) // 2]
    result = engine.generate(QUESTION, tau=tau)
    paths = [s.path for s in result.steps]
    assert ("kept" in paths) == mixed and "target-verified" in paths
    t, prompt = result.stats.target, result.usage.prompt_tokens
    last = max(i for i, p in enumerate(paths) if p != "kept")
    kept = sum(len(s.token_ids) for s in result.steps[:last] if s.path == "kept")
    # prefill covers at most the prompt and catch-ups of kept draft steps; every other target
    # token went through one verification pass; after its last pass the target's cache holds
    # exactly the output so far (its own last token may still be pending)
    assert t.prefilled <= prompt + kept  # the prompt may ride along in the first verification
    held = t.prefilled + t.decoded + t.tentative - t.discarded
    upto = prompt + len([x for s in result.steps[: last + 1] for x in s.token_ids
                         if x not in engine.target.eos_ids])
    assert upto - 1 <= held <= upto
    d = result.stats.draft
    assert d.prefilled <= prompt + result.usage.completion_tokens  # catch-ups only, no re-prefill


def test_sampling_mode_runs_and_is_seeded(engine: SpecGuardEngine) -> None:
    run = dict(k=2, temperature=0.8, tau=0.5, max_new_tokens=30, seed=3)
    a, b = engine.generate(QUESTION, **run), engine.generate(QUESTION, **run)
    assert all_ids(a) == all_ids(b)
    assert a.usage.completion_tokens == len(all_ids(a)) <= 30
    assert a.stats.draft_tokens + a.stats.target_tokens == a.usage.completion_tokens


def test_cancelling_mid_fallback_leaves_the_engine_usable(engine: SpecGuardEngine) -> None:
    stream = engine.stream(QUESTION, tau=math.inf)
    first = next(stream)
    assert first.path == "target-verified"
    stream.close()
    again = engine.generate(QUESTION, tau=math.inf)  # lock released, fresh state
    assert all_ids(again) == reference(engine.target.model, engine.prompt_ids(QUESTION), 48)


def test_heterogeneous_flag_keeps_the_regenerate_path(tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    from specguard_core import EngineConfig

    eng = SpecGuardEngine(*tiny_pair, config=SpecGuardConfig(**SD),
                          engine_config=EngineConfig(heterogeneous=True))
    eng.same_vocab = False  # a shared tokenizer, but treated as a heterogeneous pair
    result = eng.generate(QUESTION, tau=math.inf)
    assert all(s.path == "regenerated" for s in result.steps)
    assert all_ids(result) == reference(eng.target.model, eng.prompt_ids(QUESTION), 48)


def test_old_fallbacks_still_selectable(engine: SpecGuardEngine) -> None:
    greedy = engine.generate(QUESTION, tau=math.inf, fallback="greedy")
    assert all(s.path == "regenerated" for s in greedy.steps)
    assert greedy.stats.target.tentative == 0
    assert all_ids(greedy) == reference(engine.target.model, engine.prompt_ids(QUESTION), 48)


def _penalised_reference(model: Any, prompt: list[int], n: int, penalty: float) -> list[int]:
    import torch

    out = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=n, do_sample=False,
                         repetition_penalty=penalty)
    return list(out[0, len(prompt):].tolist())


@pytest.mark.parametrize("fallback", ["greedy", "speculative"])
def test_repetition_penalty_matches_target_generate(engine: SpecGuardEngine, fallback: str) -> None:
    """tau=+inf, greedy, repetition_penalty: token for token what `target.generate(...,
    do_sample=False, repetition_penalty=...)` writes, through the regenerate fallback and through
    the speculative fallback's greedy comparison (the draft proposes with the penalty too)."""
    prompt = engine.prompt_ids(QUESTION)
    want = _penalised_reference(engine.target.model, prompt, 48, 1.5)
    assert want != reference(engine.target.model, prompt, 48)  # the penalty changes the output
    result = engine.generate(QUESTION, tau=math.inf, fallback=fallback, repetition_penalty=1.5)
    assert all_ids(result) == want
    kept = engine.generate(QUESTION, tau=-math.inf, repetition_penalty=1.5)  # the draft's steps
    assert all_ids(kept) == _penalised_reference(engine.draft.model, prompt, 48, 1.5)


@pytest.mark.parametrize("knob", [dict(top_k=1), dict(min_p=1.0)])
def test_a_one_token_support_samples_greedily_on_every_path(engine: SpecGuardEngine,
                                                           knob: dict[str, Any]) -> None:
    """top_k=1 (or min_p=1) at temperature 1 leaves only the argmax: the draft's proposals, the
    sampled regeneration and speculative sampling all reproduce the models' greedy output."""
    prompt = engine.prompt_ids(QUESTION)
    hot = dict(temperature=1.0, top_p=1.0, **knob)
    assert all_ids(engine.generate(QUESTION, tau=-math.inf, **hot)) == \
        reference(engine.draft.model, prompt, 48)
    target = reference(engine.target.model, prompt, 48)
    assert all_ids(engine.generate(QUESTION, tau=math.inf, fallback="sample", fallback_k=2,
                                   **hot)) == target
    assert all_ids(engine.generate(QUESTION, tau=math.inf, fallback="speculative", **hot)) == target
    unshaped = engine.generate(QUESTION, tau=-math.inf, temperature=1.0, top_p=1.0)
    assert all_ids(unshaped) != reference(engine.draft.model, prompt, 48)  # the knob did it


def _reference_logprobs(model: Any, prompt: list[int], ids: list[int]) -> list[float]:
    """Each of `ids`' raw log-probability under `model`, from one full forward pass."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids], device=model.device)).logits[0].float()  # [P+T, V]
    rows = torch.log_softmax(logits[len(prompt) - 1: len(prompt) - 1 + len(ids)], dim=-1)
    return rows.gather(-1, torch.tensor(ids, device=rows.device)[:, None])[:, 0].tolist()


def _reference_top(model: Any, prompt: list[int], ids: list[int], n: int
                   ) -> list[list[int]]:
    """The `n` most likely tokens at each of `ids`' positions under `model`."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids], device=model.device)).logits[0].float()
    rows = logits[len(prompt) - 1: len(prompt) - 1 + len(ids)]  # [T, V]
    return rows.topk(n, dim=-1).indices.tolist()


@pytest.mark.parametrize("fallback", ["greedy", "speculative"])
def test_token_logprobs_come_from_the_model_that_wrote_or_checked_each_token(
        engine: SpecGuardEngine, fallback: str) -> None:
    """Kept unchecked: the draft's distribution; written or verified by the target (the
    speculative fallback keeps draft tokens the target's pass verified): the target's. The top
    alternatives come from the same distribution, the chosen token's value among them."""
    prompt = engine.prompt_ids(QUESTION)
    kept = engine.generate(QUESTION, tau=-math.inf, top_logprobs=3)
    ids = all_ids(kept)
    got = [lp for s in kept.steps for lp in s.token_logprobs]
    assert got == pytest.approx(_reference_logprobs(engine.draft.model, prompt, ids), abs=1e-4)
    tops = [t for s in kept.steps for t in s.top_logprobs]
    assert [[i for i, _ in t] for t in tops] == _reference_top(engine.draft.model, prompt, ids, 3)
    out = engine.generate(QUESTION, tau=math.inf, fallback=fallback, repetition_penalty=1.3,
                          top_logprobs=2)
    ids = all_ids(out)
    got = [lp for s in out.steps for lp in s.token_logprobs]
    assert len(got) == len(ids) and all(lp is not None for lp in got)
    assert got == pytest.approx(_reference_logprobs(engine.target.model, prompt, ids), abs=1e-4)
    tops = [t for s in out.steps for t in s.top_logprobs]
    assert [[i for i, _ in t] for t in tops] == _reference_top(engine.target.model, prompt, ids, 2)
    if fallback == "speculative":  # draft tokens were kept, and carry the target's values
        assert sum(s.draft_written for s in out.steps) > 0
    for step in out.steps:
        for tok, lp, top in zip(step.token_ids, step.token_logprobs, step.top_logprobs,
                                strict=True):
            assert top[0][1] >= lp - 1e-6 and (tok not in dict(top) or
                                               dict(top)[tok] == pytest.approx(lp, abs=1e-5))


def test_target_checked_steps_carry_the_targets_logprobs() -> None:
    """A draft step the target's check passed reports the target's distribution (here sharper
    than the draft's), not the draft's own."""
    from specguard_core.testing import scripted_engine

    engine = scripted_engine(lambda p: "Seven.\n\nForty-two.", draft_sharpness=6.0)
    checked = engine.generate("Go", tau_accept=math.inf, tau_reject=-math.inf, top_logprobs=1)
    kept = engine.generate("Go", tau=-math.inf, top_logprobs=1)
    assert [s.path for s in checked.steps] == ["target-checked"] * 2
    assert [s.path for s in kept.steps] == ["kept"] * 2
    import torch

    prompt = engine.prompt_ids("Go")
    ids = all_ids(checked)

    def scripted(model: Any) -> list[float]:
        logits = model(torch.tensor([prompt + ids]), logits_to_keep=0).logits[0]  # [P+T, V]
        rows = torch.log_softmax(logits[len(prompt) - 1: -1], dim=-1)
        return rows.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()

    want = scripted(engine.target.model)
    assert [lp for s in checked.steps for lp in s.token_logprobs] == pytest.approx(want, abs=1e-5)
    draft = [lp for s in kept.steps for lp in s.token_logprobs]
    assert draft == pytest.approx(scripted(engine.draft.model), abs=1e-5)
    assert all(d < t - 0.1 for d, t in zip(draft, want, strict=True))
    assert all(len(t) == 1 for s in checked.steps for t in s.top_logprobs)


def test_checking_every_step_with_ratio_one_is_the_targets_greedy_text(
        engine: SpecGuardEngine) -> None:
    """typical_ratio=1 passes only the target's argmax, so checking every step is lossless; the
    default ratio 0 (Medusa's bound alone) lets the target's less likely tokens through."""
    checked = dict(route="check")
    target = reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    strict = engine.generate(QUESTION, typical_ratio=1.0, **checked)
    assert all_ids(strict) == target
    assert all(s.path in ("target-checked", "target-verified") for s in strict.steps)
    lenient = engine.generate(QUESTION, typical_eps=0.0, typical_delta=0.0, **checked)
    assert all(s.path == "target-checked" for s in lenient.steps)  # a bound of 0 passes all
    assert all_ids(lenient) == reference(engine.draft.model, engine.prompt_ids(QUESTION), 48)


def test_typical_acceptance_in_the_fallback_keeps_more_draft_tokens(
        engine: SpecGuardEngine) -> None:
    """fallback_acceptance="typical" keeps drafted tokens the target's check would pass: with
    ratio 1 that is its argmax alone (the target's greedy text again); with Medusa's bound the
    fallback keeps more draft tokens per target pass than exact acceptance does."""
    checked = dict(route="check", typical_eps=0.03,
                   typical_delta=0.1, typical_ratio=0.3)
    target = reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    strict = engine.generate(QUESTION, experimental={"fallback_acceptance": "typical"},
                             **{**checked, "typical_ratio": 1.0})
    assert all_ids(strict) == target
    exact = engine.generate(QUESTION, **checked)
    typical = engine.generate(QUESTION, experimental={"fallback_acceptance": "typical"},
                              **checked)
    verified = [s for s in typical.steps if s.path == "target-verified"]
    assert verified and all_ids(typical) != all_ids(exact)
    per_pass = [r.stats.draft_tokens / r.stats.target_forward_passes for r in (exact, typical)]
    assert per_pass[1] > per_pass[0]


def test_a_confidence_stop_keeps_the_fallback_exact(engine: SpecGuardEngine) -> None:
    """sd_confidence ends a draft run early at a doubted token: the output is still the target's
    greedy text; stopping at every token (1.0) takes more, shorter target passes."""
    target = reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    runs = {c: engine.generate(QUESTION, tau=math.inf, experimental={"sd_confidence": c})
            for c in (0.0, 0.5, 1.0)}
    assert all(all_ids(r) == target for r in runs.values())
    passes = [runs[c].stats.target_forward_passes for c in (0.0, 1.0)]
    assert passes[1] > passes[0]
    wasted = [sum(s.draft_wasted for s in runs[c].steps) for c in (0.0, 1.0)]
    assert wasted[1] < wasted[0]


def test_a_run_confidence_stop_keeps_the_fallback_exact(engine: SpecGuardEngine) -> None:
    """sd_run_confidence ends a draft run once the product of the draft's probabilities of its
    tokens falls below it: the output is still the target's greedy text; at 1.0 every run is one
    token (more, shorter target passes, fewer wasted draft tokens), and at 0 nothing changes."""
    target = reference(engine.target.model, engine.prompt_ids(QUESTION), 48)
    runs = {c: engine.generate(QUESTION, tau=math.inf, sd_run_confidence=c)
            for c in (0.0, 0.3, 1.0)}
    assert all(all_ids(r) == target for r in runs.values())
    plain = engine.generate(QUESTION, tau=math.inf)
    assert runs[0.0].stats.target_forward_passes == plain.stats.target_forward_passes
    passes = [runs[c].stats.target_forward_passes for c in (0.0, 1.0)]
    assert passes[1] > passes[0]
    wasted = [sum(s.draft_wasted for s in runs[c].steps) for c in (0.0, 1.0)]
    assert wasted[1] < wasted[0]


class _SureDraft:
    """A draft that gives its argmax (token 5 of 10) probability 0.9 at every position."""

    eos_ids = frozenset({9})
    device = torch.device("cpu")

    def next_logits(self, state: Any) -> torch.Tensor:
        probs = torch.full((10,), 0.1 / 9)
        probs[5] = 0.9
        return probs.log()  # [V]

    def forward(self, state: Any, input_ids: torch.Tensor, **kwargs: Any) -> Forward:
        return Forward(self.next_logits(state).expand(1, input_ids.shape[1], -1), None)  # [1, q, V]

    def commit_row(self, state: Any, row: int, ids: list[int], logits: Any) -> None:
        state.ids.extend(ids)


@pytest.mark.parametrize(("knobs", "run"), [
    (dict(sd_run_confidence=0.7), 4),  # 0.9^4 = 0.66 < 0.7: the run ends at its 4th token
    (dict(sd_run_confidence=0.5), 7),  # 0.9^7 = 0.48
    (dict(experimental={"sd_confidence": 0.7}), 16),  # one token below 0.7: never
    (dict(), 16),
])
def test_a_draft_run_ends_on_the_product_of_its_probabilities(knobs: dict[str, float],
                                                              run: int) -> None:
    from specguard_core.engine.fallback import _draft_run

    cfg = SpecGuardConfig(temperature=0.0, **knobs).merged(draft_lookahead=0)  # no cache here
    req: Any = SimpleNamespace(cfg=cfg, generator=torch.Generator().manual_seed(0),
                               shaping=Shaping.of(cfg), plan=SimpleNamespace(guesses=0))
    toks, probs, rows, lps = _draft_run(_SureDraft(), SimpleNamespace(ids=[1, 2]), 16, req)  # type: ignore[arg-type]
    assert toks == [5] * run and len(lps) == run
    assert all(abs(lp - math.log(0.9)) < 1e-5 for lp in lps if lp is not None)


@pytest.mark.parametrize("tau", [math.inf, -math.inf])  # every step to the fallback / kept
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_draft_lookahead_changes_the_forwards_not_the_output(engine: SpecGuardEngine,
                                                             temperature: float, tau: float) -> None:
    """Guessed tokens the draft checks in its forwards (prompt lookup) leave every token the same
    (float32): greedy, and sampling with the same seed (one sample per token either way); in the
    fallback's draft runs and in the draft's own steps."""
    runs = {look: engine.generate(QUESTION, tau=tau, temperature=temperature, seed=3, beta=1.0,
                                  draft_lookahead=look) for look in (0, 8)}  # beta 1: no capture
    assert all_ids(runs[8]) == all_ids(runs[0])
    assert [(s.draft_wasted, s.target_passes) for s in runs[8].steps] == \
        [(s.draft_wasted, s.target_passes) for s in runs[0].steps]
    saved = runs[0].stats.draft.forward_calls - runs[8].stats.draft.forward_calls
    # this pair's greedy fallback text repeats itself; its sampled and draft-only texts too
    # little to save a forward (the scripted tests below and in test_proposer.py do)
    assert saved > 0 if temperature == 0 and tau == math.inf else saved >= 0


def test_a_lookahead_run_keeps_only_the_drafts_own_tokens() -> None:
    """`_draft_run` with guesses on a draft whose reply repeats itself: the same run as without,
    in fewer forwards, its cache holding all but the last token (the guesses the draft did not
    pick rolled back), so the draft goes on from there on its script."""
    from specguard_core.engine.fallback import _draft_run
    from specguard_core.testing import scripted_engine

    reply = "So 48 + 24 = 72, and again 48 + 24 = 72, and once more 48 + 24 = 72 clips."
    eng = scripted_engine(lambda prompt: reply)
    prompt = eng.prompt_ids("How many clips?")
    runs = {}
    for look in (0, 8):
        state = eng.draft.new_state()
        eng.draft.extend(state, prompt)
        cfg = eng.config.merged(sd_run_confidence=0.0, draft_lookahead=look)
        req: Any = SimpleNamespace(cfg=cfg, generator=torch.Generator().manual_seed(0),
                                   shaping=Shaping.of(cfg), plan=SimpleNamespace(guesses=look))
        calls = state.counters.forward_calls
        toks, probs, _rows, lps = _draft_run(eng.draft, state, 30, req)
        assert state.ids == prompt + toks[:-1]
        assert state.cache.get_seq_length() == len(state.ids)
        assert int(eng.draft.next_logits(state).argmax()) == toks[-1]
        runs[look] = (toks, probs, lps, state.counters.forward_calls - calls)
    assert eng.draft.decode(runs[0][0]) == reply[: len(eng.draft.decode(runs[0][0]))]
    assert runs[8][:3] == runs[0][:3]
    assert runs[8][3] < runs[0][3] - 5  # the repeats came from guesses


def test_the_sampled_fallback_draws_k_samples_when_fallback_k_is_unset(
        tiny_pair_on: tuple[Any, Any, Any, Any]) -> None:
    eng = SpecGuardEngine(*tiny_pair_on, config=SpecGuardConfig(**dict(GREEDY, k=1)))
    for k, fallback_k, samples in ((3, None, 3), (3, 2, 2)):
        result = eng.generate(QUESTION, tau=math.inf, fallback="sample", k=k, temperature=0.8,
                              fallback_k=fallback_k)
        regenerated = [s for s in result.steps if s.path == "regenerated"]
        assert regenerated and all(s.n_candidates == samples for s in regenerated)
