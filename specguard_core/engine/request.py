"""Per-request state (one small object) and the bookkeeping of committed steps.

The engine's loop decides *what* to commit; `Request.commit` records it: step kind, tool calls,
counters, stop conditions. `Request.result()` assembles the `GenerationResult`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specguard_core.cache.state import CacheState
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.sampling import Shaping
from specguard_core.engine.accept import TokenRule
from specguard_core.engine.plan import Plan
from specguard_core.engine.verify.verifier import Verdict
from specguard_core.text.chat import parse_tool_call
from specguard_core.text.formats import ResponseFormat, final_text
from specguard_core.text.step_text import WHOLE_CHAR_GRACE
from specguard_core.text.steps import StepRules, call_closed, step_kind, strip_markers
from specguard_core.types import (
    Cancelled,
    FinishReason,
    GenerationResult,
    PromptLogprobs,
    RunStats,
    StepKind,
    StepPath,
    StepRecord,
    StepSource,
    ToolCall,
    Usage,
)

NO_BOUND = 2**31 - 1  # tokens left when neither max_new_tokens nor a known window bounds them


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
    cut: bool = False  # the token budget ended the step (a tool call may be open in it)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)  # see StepRecord




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
    context_window: int  # the pair's (the smaller known one); 0: no window
    plan: Plan  # which path its steps take (`plan.py`), decided when it opened
    tokenizer: Any = None
    response_template: dict[str, Any] | None = None  # parses tool calls (`text.tool_calls`)
    response_format: ResponseFormat | None = None  # what the answer must be (JSON, a regex, ...)
    grammar: Grammar | None = None  # a constrained format's or the tool calls' token mask
    answer_check: AnswerCheck | None = None  # a format on the check-only path: answer steps checked
    parallel_tool_calls: bool = True  # False: the reply ends with its first tool call
    top_logprobs: int = 0  # alternatives recorded per token (`StepRecord.top_logprobs`)
    prompt_logprobs: bool = False  # the target scores the prompt (`GenerationResult.prompt_logprobs`)
    prompt_scores: PromptLogprobs | None = None  # that score, once the target's pass made it
    draft_prompt_tokens: int = 0  # the draft's prompt length (a heterogeneous pair's differs)
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
    stopped: bool = False  # a stop string cut the text (`_cut_at_stop`)
    started: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    timeout: float | None = None  # seconds for the whole request, queueing included
    deadline: float | None = None  # time.monotonic() by which it must end (set from `timeout`)

    def __post_init__(self) -> None:
        self.stats.draft, self.stats.target = self.draft.counters, self.target.counters
        self.draft_run = self.cfg.experimental.sd_draft_tokens

    @property
    def shaping(self) -> Shaping:
        """How this request's logits are shaped before any token is chosen or judged: the
        config's top-k, min-p and penalties (the reply counted from the prompt's end), and the
        strict format's grammar."""
        return Shaping.of(self.cfg, self.grammar, self.prompt_tokens)

    @property
    def draft_shaping(self) -> Shaping:
        """`shaping` over the draft's sequences (its prompt's length may differ)."""
        return Shaping.of(self.cfg, self.grammar, self.draft_prompt_tokens or self.prompt_tokens)

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
        `score` (None while the draft writes it): the plan's rule for an action or for other
        steps, as it applies at that score (`TokenRule.for_score`: `vouched` is typical until
        the step is scored, then typical or exact by its score)."""
        rule = self.plan.action_rule if self.acts(kind) else self.plan.step_rule
        return rule.for_score(score, self.cfg)

    def out_of_room(self) -> bool:
        """Either model's context is full (a heterogeneous pair counts tokens differently, so the
        draft can run out first): the request ends with `length` rather than spin out empty steps
        or feed a model past its window."""
        return self.budget(self.target) == 0 or self.budget(self.draft) == 0

    def budget(self, state: CacheState) -> int:
        """Tokens the next step may take: step cap, max_new_tokens left (when set), context window
        left."""
        return max(0, min(self.cfg.max_step_tokens, self._left(state)))

    def call_budget(self) -> int:
        """Tokens the next step may take when it opens a tool call, which no step cap cuts:
        max_new_tokens left (when set) and either model's context window left."""
        return max(0, min(self._left(self.draft), self._left(self.target)))

    def grace(self) -> int:
        """Tokens past `max_step_tokens` the next step may take to complete its first character
        (`step_text.WHOLE_CHAR_GRACE` at most): never past `max_new_tokens` or either model's
        context window."""
        left = [self._left(s) - self.budget(s) for s in (self.draft, self.target)]
        return max(0, min(WHOLE_CHAR_GRACE, *left))

    def _left(self, state: CacheState) -> int:
        """Tokens the answer may still take in `state`'s model: its context window's room (a
        window of 0 is no window: the model's size is unknown), and what `max_new_tokens` leaves
        when it is set (unset and no window: no bound here)."""
        cap = self.cfg.max_new_tokens
        left = NO_BOUND if cap is None else cap - self.n_new
        if self.context_window > 0:
            left = min(left, self.context_window - len(state.ids) - len(state.pending) - 1)
        return left

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
            token_logprobs=list(step.token_logprobs), top_logprobs=list(step.top_logprobs),
            target_written=len(step.token_ids) - step.draft_written,
            target_passes=self.target.counters.forward_calls - self._passes_mark,
            draft_wasted=max(0, step.draft_generated - step.draft_written),
        )
        self._passes_mark = self.target.counters.forward_calls
        self._count(record, phases)
        self.steps.append(record)
        self._check_stop(step)
        if self.cfg.stop:  # nothing after a stop string goes out, in the trace either
            self._cut_at_stop()
        return self.steps[-1]

    def _cut_at_stop(self) -> None:
        """Cut the committed steps' text (and the draft's rejected text) where the first stop
        string starts in the request's text, as `result` cuts the text: no step's text goes past
        it (a step before it, already streamed, may hold the stop string's beginning)."""
        raw = self.raw_text()
        hits = [raw.find(s) for s in self.cfg.stop if s in raw]
        if not hits:
            return
        self.stopped = True
        stop, pos = min(hits), 0
        for i, s in enumerate(self.steps):
            keep = max(0, stop - pos)  # of this step's text, what comes before the stop
            pos += len(s.text)
            if keep < len(s.text):  # the stop starts in this step (or an earlier one)
                draft = None if s.draft_text is None else s.draft_text[:keep]
                self.steps[i] = replace(s, text=s.text[:keep], draft_text=draft)

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
            # a call without its closer: what follows would be made-up results; one the budget
            # ended was cut by max_new_tokens or the window (maybe inside a character, trimmed)
            self.finish = "length" if step.cut or self._spent() else "stop"
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
            text=final_text(_trimmed("".join(answer), self.stopped),
                            self.response_format), raw_text=raw,
            reasoning="".join(reasoning).strip(),
            steps=list(self.steps), usage=Usage(self.prompt_tokens, self.n_new), stats=self.stats,
            finish_reason=self.finish or "stop", tool_calls=list(self.tool_calls),
            invalid_tool_calls=list(self.invalid_tool_calls), model_name=model_name,
            verifier=self.cfg.verifier, plan=self.plan.record(),
            prompt_logprobs=self.prompt_scores,
        )


def _trimmed(answer: str, cut: bool) -> str:
    """The answer without the whitespace around it; what comes right before a stop string that
    cut it is kept as written (vLLM keeps "...Line " before a stop "1")."""
    return answer.lstrip() if cut else answer.strip()
