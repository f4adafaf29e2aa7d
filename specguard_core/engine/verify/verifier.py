"""Score and decide: the selected draft step's confidence and grounding, normalised, ensembled and
thresholded; tool-call steps must also be structurally valid and respect the tool choice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.state import TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.proposer import Candidate
from specguard_core.engine.verify import signals
from specguard_core.engine.verify.cards import load_probe
from specguard_core.text.chat import parse_tool_call
from specguard_core.text.formats import ResponseFormat, check_answer
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


Route = Literal["keep", "check", "reject"]


@dataclass(frozen=True)
class Verdict:
    """The decision on the selected draft step: keep it, have the target check it, or reject it."""

    scores: Scores
    score: float
    route: Route
    reason: str | None = None
    tool_call: ToolCall | None = None

    @property
    def accepted(self) -> bool:
        """Kept on the score alone (the paper's accept)."""
        return self.route == "keep"


def draft_scores(cand: Candidate, cfg: SpecGuardConfig) -> Scores:
    """Signals from what the draft computed while it generated the step (no extra pass); grounding
    is None when no attention rows were captured."""
    rows = cand.step_rows
    logps = torch.tensor(cand.logprobs)  # [T]
    return Scores(signals.confidence(logps),
                  None if rows is None else signals.grounding(rows, cfg.rollout_residual),
                  cand.pooled, float(logps.mean()) if logps.numel() else 0.0, cand.n_fed)


def target_scores(tpass: TentativePass, recorder: AttentionRecorder | None,
                  cfg: SpecGuardConfig, pool_layers: tuple[int, ...] = ()) -> Scores:
    """Signals from the target's pass over the step (teacher-forced; `recorder` captured its
    attention, or None; `pool_layers` are averaged over the step's hidden states, which the pass
    must have computed). Pure: the pass stays tentative; the caller keeps or discards it."""
    ids = tpass.ids
    if not ids:
        return Scores(0.0, 1.0 if recorder else None)
    n = len(ids)
    logps = torch.log_softmax(tpass.logits[:n], -1).gather(
        -1, torch.tensor(ids, device=tpass.logits.device)[:, None])[:, 0]  # [T]
    layers = tpass.forward.layers if tpass.forward is not None else None
    pooled = {i: layers[i][0, -n:].float().mean(dim=0).cpu() for i in pool_layers} if layers \
        else {}  # each [d]: the step's own positions
    extra = (pooled, float(logps.mean()), n)
    if recorder is None:
        return Scores(signals.confidence(logps), None, *extra)
    att = signals.sparsify_rows(recorder.stacked()[0], cfg.sparsify_threshold)  # [L, P+T, n]
    return Scores(signals.confidence(logps),
                  signals.grounding(att[:, -n:, -n:], cfg.rollout_residual),  # step rows, cols
                  *extra)


def step_score(scores: Scores, cfg: SpecGuardConfig) -> float:
    """The configured verifier's score r of a step (what the decision rule thresholds): the paper's
    ensemble, or a probe card's probability that the step is correct."""
    if cfg.verifier == "paper":
        return paper_score(scores, cfg)
    if cfg.verifier == "auto":  # a programming error: the engine resolves it per request
        raise ValueError("verifier='auto' must be resolved to 'paper' or a card path first "
                         "(SpecGuardEngine does this per request)")
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
    """(r, keep the step without the target?): keep iff r >= tau_accept (= tau unless set)."""
    score, route = decide_route(scores, cfg)
    return score, route == "keep"


def decide_route(scores: Scores, cfg: SpecGuardConfig) -> tuple[float, Route]:
    """(r, route): the decision rule, apart from how r is computed. `route="check"`: the target
    checks every step. Else keep iff r >= tau_accept, reject iff r < tau_reject, else the target
    checks (tau_accept == tau_reject: the paper's rule)."""
    score = step_score(scores, cfg)
    if cfg.route == "check":
        return score, "check"
    accept_at, reject_below = cfg.thresholds
    if signals.accept(score, accept_at):
        return score, "keep"
    if not signals.accept(score, reject_below):
        return score, "reject"
    return score, "check"


def structural_check(text: str, kind: StepKind, tools: list[dict[str, Any]],
                     required: str | None, tokenizer: Any,
                     response_format: ResponseFormat | None = None, answer_before: str = "",
                     done: bool = False) -> tuple[str | None, ToolCall | None]:
    """(reason to reject or None, parsed tool call) for a step of `kind`.

    `required` is the tool choice still owed: "*" for any call, a name, or None. Under a
    `response_format`, an answer step must keep the answer (`answer_before` + `text`) on course to
    one JSON object that matches it (`done`: the step ends the turn, so the object must be whole).
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
    if response_format is not None and kind == "answer":
        return check_answer(answer_before + text, response_format, done), None
    return None, None


def verify(scores: Scores, cfg: SpecGuardConfig, structural: str | None,
           call: ToolCall | None, action: bool = False) -> Verdict:
    """The route of a draft step: structural failures are rejected; an action (a tool call, or
    the turn's first step when tools are offered) the score would keep is checked by the target
    instead."""
    score, route = decide_route(scores, cfg)
    if structural:
        return Verdict(scores, score, "reject", structural, call)
    if action and route == "keep":
        route = "check"
    reason = f"score {score:.3f} < tau_reject {cfg.thresholds[1]}" if route == "reject" else None
    return Verdict(scores, score, route, reason, call)
