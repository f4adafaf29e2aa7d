"""Score and decide: the selected draft step's signals, scored by the configured verifier
(`registry.py`) and routed; tool-call steps must also be structurally valid and respect the tool
choice. `Scores` and `paper_score` are re-exported from `registry`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.state import TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.proposal import Candidate
from specguard_core.engine.verify import signals
from specguard_core.engine.verify.registry import Scores, paper_score, verifier_for
from specguard_core.text.chat import parse_tool_call
from specguard_core.types import StepKind, ToolCall

__all__ = ["Scores", "Verdict", "decide_route", "draft_scores", "paper_score", "step_score",
           "structural_check", "target_scores", "verify"]


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
                  None if rows is None else signals.grounding(rows, cfg.experimental.rollout_residual),
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
    att = signals.sparsify_rows(recorder.stacked()[0], cfg.experimental.sparsify_threshold)  # [L, P+T, n]
    return Scores(signals.confidence(logps),
                  signals.grounding(att[:, -n:, -n:], cfg.experimental.rollout_residual),  # step rows, cols
                  *extra)


def step_score(scores: Scores, cfg: SpecGuardConfig) -> float:
    """The configured verifier's score r of a step (what the decision rule thresholds): the paper's
    ensemble, a probe card's probability that the step is correct, or a registered verifier's."""
    return verifier_for(cfg.verifier).score(scores, cfg)


def decide_route(scores: Scores, cfg: SpecGuardConfig,
                 route: Literal["score", "check"] | None = None) -> tuple[float, Route]:
    """(r, route): the decision rule, apart from how r is computed, on `route` (else
    `cfg.route`). "check": the target checks every step. Else keep iff r >= tau_accept, reject
    iff r < tau_reject, else the target checks (tau_accept == tau_reject: the paper's rule)."""
    score = step_score(scores, cfg)
    if (route or cfg.route) == "check":
        return score, "check"
    accept_at, reject_below = cfg.thresholds
    if signals.accept(score, accept_at):
        return score, "keep"
    if not signals.accept(score, reject_below):
        return score, "reject"
    return score, "check"


def structural_check(text: str, kind: StepKind, tools: list[dict[str, Any]],
                     required: str | None, tokenizer: Any, template: dict[str, Any] | None,
                     answer_check: AnswerCheck | None = None, answer_before: str = "",
                     done: bool = False) -> tuple[str | None, ToolCall | None]:
    """(reason to reject or None, parsed tool call) for a step of `kind`.

    `required` is the tool choice still owed: "*" for any call, a name, or None. With an
    `answer_check` (a response format on the check-only path), an answer step must keep the answer
    (`answer_before` + `text`) on course to one JSON object that matches it (`done`: the step ends
    the turn, so the object must be whole).
    """
    if kind == "tool_call":
        call = parse_tool_call(text, tools, tokenizer, template)
        if call.error:
            return call.error, call
        if required not in (None, "*") and call.name != required:
            return f"tool_choice requires {required!r}, got {call.name!r}", call
        return None, call
    if required and kind == "answer" and text.strip():
        return "tool_choice requires a tool call before answering", None
    if answer_check is not None and kind == "answer":
        return answer_check(answer_before + text, done), None
    return None, None


def verify(scores: Scores, cfg: SpecGuardConfig, structural: str | None,
           call: ToolCall | None, action: bool = False,
           route: Literal["score", "check"] | None = None) -> Verdict:
    """The route of a draft step (on the request's `route`, the plan's; default `cfg.route`):
    structural failures are rejected; an action (a tool call, or the turn's first step when tools
    are offered) the score would keep is checked by the target instead."""
    score, routed = decide_route(scores, cfg, route)
    if structural:
        return Verdict(scores, score, "reject", structural, call)
    if action and routed == "keep":
        routed = "check"
    reason = f"score {score:.3f} < tau_reject {cfg.thresholds[1]}" if routed == "reject" else None
    return Verdict(scores, score, routed, reason, call)
