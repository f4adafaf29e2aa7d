"""Score and decide: the selected draft step's confidence and grounding, normalised, ensembled and
thresholded; tool-call steps must also be structurally valid and respect the tool choice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from specguard_core.config import SpecGuardConfig
from specguard_core.engine import signals
from specguard_core.engine.capture import AttentionRecorder
from specguard_core.engine.chat import parse_tool_call
from specguard_core.engine.handle import CacheState, ModelHandle
from specguard_core.engine.probe import load_probe
from specguard_core.engine.proposer import Candidate
from specguard_core.types import StepKind, ToolCall


@dataclass(frozen=True)
class Scores:
    confidence: float
    grounding: float | None  # None: not computed (beta == 1, no attention captured)
    # what a learned verifier (probe card) reads: Candidate.pooled, and the step's other scalars
    pooled: Mapping[int, torch.Tensor] = field(default_factory=dict)  # layer -> [d]
    mean_logprob: float | None = None
    n_tokens: int | None = None

    def scalars(self) -> dict[str, float]:
        """The named scalar features that were computed (a probe card refers to them by name)."""
        named = {"confidence": self.confidence, "grounding": self.grounding,
                 "mean_logprob": self.mean_logprob, "n_tokens": self.n_tokens}
        return {k: float(v) for k, v in named.items() if v is not None}


@dataclass(frozen=True)
class Verdict:
    scores: Scores
    score: float
    accepted: bool
    reason: str | None = None
    tool_call: ToolCall | None = None


def draft_scores(cand: Candidate, cfg: SpecGuardConfig) -> Scores:
    """Signals from what the draft computed while it generated the step (no extra pass); grounding
    is None when no attention rows were captured."""
    rows = cand.step_rows
    logps = torch.tensor(cand.logprobs)  # [T]
    return Scores(signals.confidence(logps),
                  None if rows is None else signals.grounding(rows, cfg.rollout_residual),
                  cand.pooled, float(logps.mean()) if logps.numel() else 0.0, cand.n_fed)


def target_scores(target: ModelHandle, state: CacheState, step_ids: list[int],
                  layers: frozenset[int] | None, cfg: SpecGuardConfig,
                  pool_layers: tuple[int, ...] = ()) -> Scores:
    """Signals from the target, teacher-forcing the step: one catch-up pass, with capture unless
    `layers` is None, and the mean hidden state of each of `pool_layers` over the step. The step is
    then committed in `state`; the caller rolls it back if the step is rejected."""
    n0 = len(state.ids)
    first = target.next_logits(state)  # [V] predicts step_ids[0]
    recorder = AttentionRecorder(layers) if layers else None
    out = target.extend(state, step_ids, all_logits=True, recorder=recorder,
                        hidden=bool(pool_layers))
    if out is None:
        return Scores(0.0, 1.0 if recorder else None)
    logits = torch.cat([first[None], out.logits[0, :-1]])  # [T, V] predicting each step token
    logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(step_ids)[:, None])[:, 0]
    pooled = {i: out.layers[i][0].float().mean(dim=0) for i in pool_layers} if out.layers else {}
    extra = (pooled, float(logps.mean()), len(step_ids))
    if recorder is None:
        return Scores(signals.confidence(logps), None, *extra)
    att = signals.sparsify_rows(recorder.stacked()[0], cfg.sparsify_threshold)  # [L, T, n]
    return Scores(signals.confidence(logps), signals.grounding(att[:, :, n0:], cfg.rollout_residual),
                  *extra)


def step_score(scores: Scores, cfg: SpecGuardConfig) -> float:
    """The configured verifier's score r of a step (what the decision rule thresholds): the paper's
    ensemble, or a probe card's probability that the step is correct."""
    if cfg.verifier == "paper":
        return paper_score(scores, cfg)
    return load_probe(cfg.verifier).score(scores.pooled, scores.scalars())


def paper_score(scores: Scores, cfg: SpecGuardConfig) -> float:
    """The paper's verifier: r = beta * l~ + (1 - beta) * g~ with min-max bounds. Grounding may be
    missing only when beta == 1 (its weight is 0)."""
    b = cfg.bounds
    conf = signals.min_max(scores.confidence, b.confidence_min, b.confidence_max)
    if scores.grounding is None and cfg.beta < 1:
        raise ValueError("grounding was not computed but beta < 1 gives it weight")
    ground = 0.0 if scores.grounding is None else signals.min_max(
        scores.grounding, b.grounding_min, b.grounding_max)
    return signals.ensemble(conf, ground, cfg.beta)


def decide(scores: Scores, cfg: SpecGuardConfig) -> tuple[float, bool]:
    """(r, keep the step?): the decision rule, apart from how r is computed: keep iff r >= tau."""
    score = step_score(scores, cfg)
    return score, signals.accept(score, cfg.tau)


def structural_check(text: str, kind: StepKind, tools: list[dict[str, Any]],
                     required: str | None, tokenizer: Any) -> tuple[str | None, ToolCall | None]:
    """(reason to reject or None, parsed tool call) for a step of `kind`.

    `required` is the tool choice still owed: "*" for any call, a name, or None.
    """
    if kind == "tool_call":
        call = parse_tool_call(text, tools, tokenizer)
        if call.error:
            return call.error, call
        if required not in (None, "*") and call.name != required:
            return f"tool_choice requires {required!r}, got {call.name!r}", call
        return None, call
    if required and kind == "answer" and text.strip():
        return "tool_choice requires a tool call before answering", None
    return None, None


def verify(scores: Scores, cfg: SpecGuardConfig, structural: str | None,
           call: ToolCall | None) -> Verdict:
    score, ok = decide(scores, cfg)
    if structural:
        return Verdict(scores, score, False, structural, call)
    return Verdict(scores, score, ok, None if ok else f"score {score:.3f} < tau {cfg.tau}", call)
