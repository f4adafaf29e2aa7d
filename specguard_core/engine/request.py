"""Per-request state (one small object) and the bookkeeping of committed steps.

The engine's loop decides *what* to commit; `Request.commit` records it: step kind, tool calls,
counters, stop conditions. `Request.result()` assembles the `GenerationResult`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from specguard_core.cache.state import CacheState
from specguard_core.config import SpecGuardConfig, TokenRule
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.sampling import Shaping
from specguard_core.engine.verify.verifier import Verdict
from specguard_core.text.chat import parse_tool_call
from specguard_core.text.formats import ResponseFormat, final_text
from specguard_core.text.step_text import WHOLE_CHAR_GRACE
from specguard_core.text.steps import StepRules, call_closed, step_kind, strip_markers
from specguard_core.types import (
    Cancelled,
    FinishReason,
    GenerationResult,
    RunStats,
    StepKind,
    StepPath,
    StepRecord,
    StepSource,
    ToolCall,
    Usage,
)


class Phases(dict[str, float]):
    """Seconds per phase of one step: `with timed("propose"): ...`."""

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self[name] = self.get(name, 0.0) + time.perf_counter() - t0

    def move(self, seconds: float, src: str, dst: str) -> None:
        """Count `seconds` timed inside phase `src` as phase `dst`'s."""
        if seconds:
            self[src] = self.get(src, 0.0) - seconds
            self[dst] = self.get(dst, 0.0) + seconds


@dataclass
class Step:
    """A step chosen for commit: its tokens (EOS included when it ended the turn) and text.
    `kind` is `step_kind`'s answer when the caller already has it for this text (not recomputed);
    `draft_written` of the tokens came from the draft (the rest from the target)."""

    token_ids: list[int]
    text: str
    source: StepSource
    eos: bool
    n_candidates: int
    tool_call: ToolCall | None = None
    path: StepPath = "regenerated"
    kind: tuple[StepKind, bool] | None = None
    verified_prefix: int = 0
    draft_written: int = 0
    draft_generated: int = 0  # draft tokens generated for this step, all rows and rounds
    token_logprobs: list[float | None] = field(default_factory=list)  # see StepRecord
    acceptance: str | None = None  # the rule the target's check judged the draft step by




@dataclass
class Request:
    cfg: SpecGuardConfig
    tools: list[dict[str, Any]]
    required: str | None  # tool call still owed: "*", a tool name, or None
    rules: StepRules
    draft: CacheState
    target: CacheState
    generator: torch.Generator
    prompt_tokens: int
    context_window: int
    tokenizer: Any = None
    response_template: dict[str, Any] | None = None  # parses tool calls (`text.tool_calls`)
    response_format: ResponseFormat | None = None  # what the answer must be (JSON, a regex, ...)
    grammar: Grammar | None = None  # a constrained format's or the tool calls' token mask
    answer_check: AnswerCheck | None = None  # a format on the check-only path: answer steps checked
    parallel_tool_calls: bool = True  # False: the reply ends with its first tool call
    stats: RunStats = field(default_factory=RunStats)
    steps: list[StepRecord] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    invalid_tool_calls: list[ToolCall] = field(default_factory=list)
    n_new: int = 0
    in_think: bool = False
    decided: bool = False  # a step outside a think block was committed: the turn chose call/answer
    draft_run: int = 0  # speculative fallback: tokens the draft proposes per target pass (adapts)
    _passes_mark: int = 0
    finish: FinishReason | None = None
    started: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    timeout: float | None = None  # seconds for the whole request, queueing included
    deadline: float | None = None  # time.monotonic() by which it must end (set from `timeout`)

    def __post_init__(self) -> None:
        self.stats.draft, self.stats.target = self.draft.counters, self.target.counters
        self.draft_run = self.cfg.sd_draft_tokens

    @property
    def shaping(self) -> Shaping:
        """How this request's logits are shaped before any token is chosen or judged: the
        config's top-k, min-p and repetition penalty, and the request's grammar."""
        return Shaping.of(self.cfg, self.grammar)

    @property
    def forced(self) -> bool:
        """A tool call is owed and no grammar writes it: the target starts the call with its
        prefix (`text.tool_calls.forced_call_prefix`) and writes the step itself."""
        return self.required is not None and not self.in_think and self.grammar is None

    def check(self) -> None:
        """Stop work at once if the request was cancelled (`Cancelled`) or ran past its deadline
        (`TimeoutError`). Called before every forward pass, so neither waits for a step to end."""
        if self.cancel.is_set():
            raise Cancelled
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError(f"SpecGuard generation exceeded its timeout of {self.timeout}s")

    def acts(self, kind: StepKind) -> bool:
        """Whether a step of `kind` is an action: tools are offered and it is a tool call or the
        turn's first step outside a think block (where the model chooses between calling and
        answering)."""
        return bool(self.tools) and not self.in_think and (kind == "tool_call" or not self.decided)

    def rule_for(self, kind: StepKind, score: float | None = None) -> TokenRule:
        """The token rule the target's check applies to a draft step of `kind` with verifier
        `score`: `action_acceptance` for an action, `acceptance` for everything else, where
        `vouched` is `typical` for a step scored at least `tau` and `exact` for the rest; with no
        score yet (while the draft writes the step) `typical`, the looser of the two, so the step
        is judged again once scored."""
        if self.acts(kind) and self.cfg.action_acceptance == "exact":
            return "exact"
        rule = self.cfg.acceptance
        if rule != "vouched":
            return rule
        return "typical" if score is None or score >= self.cfg.tau else "exact"

    def out_of_room(self) -> bool:
        """Either model's context is full (a heterogeneous pair counts tokens differently, so the
        draft can run out first): the request ends with `length` rather than spin out empty steps
        or feed a model past its window."""
        return self.budget(self.target) == 0 or self.budget(self.draft) == 0

    def budget(self, state: CacheState) -> int:
        """Tokens the next step may take: step cap, max_new_tokens left (when set), context window
        left."""
        return max(0, min(self.cfg.max_step_tokens, self._left(state)))

    def grace(self) -> int:
        """Tokens past `max_step_tokens` the next step may take to complete its first character
        (`proposer.WHOLE_CHAR_GRACE` at most): never past `max_new_tokens` or either model's
        context window."""
        left = [self._left(s) - self.budget(s) for s in (self.draft, self.target)]
        return max(0, min(WHOLE_CHAR_GRACE, *left))

    def _left(self, state: CacheState) -> int:
        """Tokens the answer may still take in `state`'s model: its context window's room, and
        what `max_new_tokens` leaves when it is set (unset: the window alone)."""
        room = self.context_window - len(state.ids) - len(state.pending) - 1
        cap = self.cfg.max_new_tokens
        return room if cap is None else min(room, cap - self.n_new)

    def commit(self, step: Step, verdict: Verdict | None, phases: dict[str, float],
               draft_text: str | None) -> StepRecord:
        was_in_think = self.in_think
        kind, self.in_think = step.kind or step_kind(step.text, self.in_think, self.rules)
        self.decided = self.decided or not (was_in_think or self.in_think)
        call = step.tool_call
        if kind == "tool_call":
            call = call or parse_tool_call(step.text, self.tools, self.tokenizer,
                                          self.response_template)
            (self.tool_calls if call.valid else self.invalid_tool_calls).append(call)
            self.required = None  # owed call made (or failed from both models): stop forcing
        record = StepRecord(
            index=len(self.steps), text=step.text, token_ids=step.token_ids, source=step.source,
            kind=kind, confidence=verdict.scores.confidence if verdict else None,
            grounding=verdict.scores.grounding if verdict else None,
            score=verdict.score if verdict else None,
            accepted=step.path in ("kept", "target-checked"),
            n_candidates=step.n_candidates, latency_s=sum(phases.values()),
            tool_call=call if kind == "tool_call" else None,
            rejected_reason=verdict.reason if verdict and step.source == "target" else None,
            draft_text=draft_text, phase_s=dict(phases), path=step.path,
            verified_prefix=step.verified_prefix, draft_written=step.draft_written,
            acceptance=step.acceptance,
            token_logprobs=list(step.token_logprobs),
            target_written=len(step.token_ids) - step.draft_written,
            target_passes=self.target.counters.forward_calls - self._passes_mark,
            draft_wasted=max(0, step.draft_generated - step.draft_written),
        )
        self._passes_mark = self.target.counters.forward_calls
        self._count(record, phases)
        self.steps.append(record)
        self._check_stop(step)
        return record

    def _count(self, record: StepRecord, phases: dict[str, float]) -> None:
        s = self.stats
        s.steps += 1
        n = len(record.token_ids)
        self.n_new += n
        s.draft_tokens += record.draft_written
        s.target_tokens += record.target_written
        s.draft_tokens_wasted += record.draft_wasted
        if record.path in ("kept", "target-checked"):
            s.steps_accepted += 1
            s.steps_kept += record.path == "kept"
            s.steps_target_checked += record.path == "target-checked"
        else:
            s.steps_regenerated += record.score is not None
            s.steps_target_verified += record.path == "target-verified"
        for phase, seconds in phases.items():
            s.add_time(phase, seconds)

    def _check_stop(self, step: Step) -> None:
        raw = self.raw_text()
        if step.eos:
            self.finish = "stop"
        elif self.steps[-1].kind == "tool_call" and not call_closed(step.text, self.rules):
            # a call without its closer: what follows would be made-up results
            self.finish = "length" if self._spent() else "stop"
        elif self.steps[-1].kind == "tool_call" and not self.parallel_tool_calls:
            self.finish = "stop"
        elif any(stop in raw for stop in self.cfg.stop):
            self.finish = "stop"
        elif self._spent():
            self.finish = "length"
        elif self.cfg.max_steps is not None and len(self.steps) >= self.cfg.max_steps:
            self.finish = "max_steps"
        if self.finish == "stop" and self.tool_calls:
            self.finish = "tool_calls"

    def _spent(self) -> bool:
        cap = self.cfg.max_new_tokens
        return (cap is not None and self.n_new >= cap) or self.out_of_room()

    def raw_text(self) -> str:
        return "".join(s.text for s in self.steps)

    def answer_text(self) -> str:
        """The answer steps committed so far (what a response format is checked against)."""
        return "".join(s.text for s in self.steps if s.kind == "answer")

    def result(self, model_name: str) -> GenerationResult:
        raw = self.raw_text()
        for stop in self.cfg.stop:  # stop strings end the text, as in transformers/OpenAI
            raw = raw.split(stop, 1)[0] if stop in raw else raw
        answer, reasoning, pos = [], [], 0
        for s in self.steps:  # steps cut at a stop string keep only their text before it
            text = raw[pos: pos + len(s.text)]
            pos += len(s.text)
            if s.kind == "answer":
                answer.append(text)
            elif s.kind == "reasoning":
                reasoning.append(strip_markers(text, self.rules))
        self.stats.wall_time_s = time.perf_counter() - self.started
        return GenerationResult(
            text=final_text("".join(answer).strip(), self.response_format), raw_text=raw,
            reasoning="".join(reasoning).strip(),
            steps=list(self.steps), usage=Usage(self.prompt_tokens, self.n_new), stats=self.stats,
            finish_reason=self.finish or "stop", tool_calls=list(self.tool_calls),
            invalid_tool_calls=list(self.invalid_tool_calls), model_name=model_name,
            verifier=self.cfg.verifier,
        )
