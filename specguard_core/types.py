"""Dataclasses that cross the engine's seams: what a step is, what a run returns.

Everything here is plain data (no tensors), so results can be serialised, streamed and compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

LOGPROB_FLOOR = -9999.0  # what vLLM reports for a probability that underflowed (JSON has no -inf)


class Cancelled(Exception):
    """Raised inside the engine when a request's stream was closed; ends the request quietly."""


StepSource = Literal["draft", "target"]
StepKind = Literal["reasoning", "answer", "tool_call"]
# kept: the draft's step on its score alone; target-checked: the draft's step after the target's
# one-pass check; target-verified: the target kept a prefix of the draft's step and finished it with
# draft-assisted decoding; regenerated: the target wrote the step (the greedy/sample fallbacks)
StepPath = Literal["kept", "target-checked", "target-verified", "regenerated"]


@dataclass(frozen=True)
class ToolCall:
    """One structured tool call parsed from a tool-call step.

    `error` is None for a valid call; otherwise it says why the call is invalid (bad JSON, unknown
    tool, schema violation) and `arguments` may be empty. `raw` is the block's text as generated.
    `named`: an invalid call that still names a tool with plain JSON arguments (a misspelt tool,
    arguments off the schema), which agents are shown so they answer the error
    (`shown`).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str = ""
    error: str | None = None
    named: bool = False

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def shown(self) -> bool:
        """Whether an agent sees this as a tool call: a valid call, or an invalid one that still
        names a tool with plain JSON arguments (`named`), so that the agent's own error path
        answers it ("Error: mult is not a valid tool", a tool's argument error) and the model can
        retry, as ChatOpenAI, ChatOllama and vLLM's tool parsers return such calls. A call that
        did not parse, or whose name or arguments are not plain JSON (an unpaired surrogate, a
        non-finite number, too deep), is not one."""
        return self.valid or self.named


@dataclass(frozen=True)
class StepRecord:
    """One committed step, emitted by `engine.stream` as soon as it is committed.

    `confidence`, `grounding` and `score` are the draft's signals for the *proposed* draft step
    (None when no draft step was scored, e.g. a forced tool-call step; `grounding` is also None when
    `beta == 1`, where it has no weight and attention is not captured). `accepted` says whether that
    draft step was kept whole; when it is False, `source` is "target" and `text` is the step the
    target wrote or verified. `path` says how the step was made; `verified_prefix` is how many of
    the draft step's tokens the target verified and kept (target-verified); `draft_written` /
    `target_written` split the step's tokens by the model that produced them (draft tokens the target
    verified count as the draft's); `target_passes` counts the target's forward passes in this step;
    `draft_wasted` the draft's tokens generated and not committed (all candidate rows included).
    `token_logprobs[i]` is the log-probability of `token_ids[i]` under the model that wrote it (the
    draft for its kept tokens, the target for its own), raw as vLLM reports by default: the
    model's temperature-1 distribution before the repetition penalty, top-k, top-p and min-p; None
    for a token no model chose (a forced tool-call prefix). Not part of `trace()`. `top_logprobs[i]`
    (when the request asked for `top_logprobs=N`; else empty) is the N most likely tokens at that
    position as (id, raw log-probability), most likely first. Both come from one distribution: the
    target's wherever it wrote the token or ran a pass over it (a target-checked or
    target-verified step, a step the target scored, a regenerated one), the draft's for a step
    kept on its score alone (`path="kept"`, unchecked); a heterogeneous pair's checked steps keep
    the draft's (the target's pass is over other tokens). `acceptance`
    names the token rule the target's check judged the draft step by (`typical`, `exact`,
    `exact-numbers`; under `acceptance="vouched"`, the one the step's score chose; None when no
    check judged it: kept on its score, or regenerated).
    """

    index: int
    text: str
    token_ids: list[int]
    source: StepSource
    kind: StepKind
    confidence: float | None
    grounding: float | None
    score: float | None
    accepted: bool
    n_candidates: int
    latency_s: float
    tool_call: ToolCall | None = None
    rejected_reason: str | None = None
    draft_text: str | None = None
    phase_s: dict[str, float] = field(default_factory=dict)
    path: StepPath = "kept"
    verified_prefix: int = 0
    draft_written: int = 0
    target_written: int = 0
    target_passes: int = 0
    draft_wasted: int = 0
    token_logprobs: list[float | None] = field(default_factory=list)
    acceptance: str | None = None
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def trace(self) -> dict[str, Any]:
        """The step as every consumer reports it (both adapters' metadata, the bench's stored
        traces, the CLI's JSON): one schema, JSON-serialisable, keyed by `index`."""
        return {
            "index": self.index, "source": self.source, "kind": self.kind, "path": self.path,
            "accepted": self.accepted, "verified_prefix": self.verified_prefix,
            "draft_written": self.draft_written, "target_written": self.target_written,
            "target_passes": self.target_passes, "draft_wasted": self.draft_wasted,
            "acceptance": self.acceptance, "score": self.score, "confidence": self.confidence,
            "grounding": self.grounding, "tokens": len(self.token_ids),
            "n_candidates": self.n_candidates, "latency_s": self.latency_s,
            "phase_s": dict(self.phase_s), "rejected_reason": self.rejected_reason,
            "draft_text": None if self.accepted else self.draft_text, "text": self.text,
        }


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelCounters:
    """Tokens one model encoded during a run: `prefilled` were fed in multi-token passes (prompt and
    catch-up), `decoded` were fed one position at a time (summed over the batch rows), `tentative`
    in verification passes. Invariant for a model that never forked: prefilled + decoded +
    tentative - discarded is the length of its cache."""

    prefilled: int = 0
    decoded: int = 0
    tentative: int = 0  # fed in verification passes, before the keep/discard decision
    discarded: int = 0  # cache positions rolled back (rejected rows and tokens)
    forward_calls: int = 0


@dataclass
class RunStats:
    wall_time_s: float = 0.0
    phase_time_s: dict[str, float] = field(default_factory=dict)
    """Counts over a run. `steps_accepted` = `steps_kept` + `steps_target_checked` (draft steps
    committed whole); `steps_regenerated` counts scored steps whose draft step was not kept whole,
    of which `steps_target_verified` went through the speculative fallback. `draft_tokens` /
    `target_tokens` split the output by the model that wrote it."""

    steps: int = 0
    steps_accepted: int = 0
    steps_regenerated: int = 0
    steps_kept: int = 0
    steps_target_checked: int = 0
    steps_target_verified: int = 0
    draft_tokens: int = 0
    target_tokens: int = 0
    draft_tokens_wasted: int = 0
    draft: ModelCounters = field(default_factory=ModelCounters)
    target: ModelCounters = field(default_factory=ModelCounters)

    @property
    def target_forward_passes(self) -> int:
        return self.target.forward_calls

    @property
    def tokens_per_target_forward(self) -> float | None:
        """Output tokens per target forward pass (None when the target never ran)."""
        calls = self.target.forward_calls
        return (self.draft_tokens + self.target_tokens) / calls if calls else None

    @property
    def acceptance_rate(self) -> float:
        scored = self.steps_accepted + self.steps_regenerated
        return self.steps_accepted / scored if scored else 0.0

    @property
    def target_token_fraction(self) -> float:
        total = self.draft_tokens + self.target_tokens
        return self.target_tokens / total if total else 0.0

    def add_time(self, phase: str, seconds: float) -> None:
        self.phase_time_s[phase] = self.phase_time_s.get(phase, 0.0) + seconds

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["acceptance_rate"] = self.acceptance_rate
        out["target_token_fraction"] = self.target_token_fraction
        out["target_forward_passes"] = self.target_forward_passes
        out["tokens_per_target_forward"] = self.tokens_per_target_forward
        return out


FinishReason = Literal["stop", "length", "tool_calls", "max_steps"]


@dataclass
class PromptLogprobs:
    """The prompt's tokens as the target scores them (`prompt_logprobs=True`), from its one pass
    over the prompt: `logprobs[i]` is the raw log-probability of `token_ids[i]` given the tokens
    before it (None for the first, which has nothing before it), `top[i]` the `top_logprobs` most
    likely tokens there as (id, log-probability), most likely first ([] for the first)."""

    token_ids: list[int]
    logprobs: list[float | None]
    top: list[list[tuple[int, float]]]


@dataclass
class GenerationResult:
    """What `engine.generate` returns.

    `text` is the answer content (reasoning and tool-call blocks removed); `reasoning` the
    `<think>` content; `raw_text` everything the engine committed. `tool_calls` holds the valid calls,
    `invalid_tool_calls` the ones that failed verification from both models.
    """

    text: str
    raw_text: str
    reasoning: str
    steps: list[StepRecord]
    usage: Usage
    stats: RunStats
    finish_reason: FinishReason
    tool_calls: list[ToolCall] = field(default_factory=list)
    invalid_tool_calls: list[ToolCall] = field(default_factory=list)
    model_name: str = ""
    verifier: str = ""  # what scored the steps: "paper" or a card's path (`verifier="auto"` resolved)
    # which path the steps took (`engine/plan.py` `Plan.record`): route, check, fallback, guesses,
    # token rules, and `notes` saying what the config asked for that was off, and why
    plan: dict[str, Any] = field(default_factory=dict)
    prompt_logprobs: PromptLogprobs | None = None

    @property
    def calls_written(self) -> list[ToolCall]:
        """Every tool call of the run, valid or not, in the order written."""
        return [s.tool_call for s in self.steps if s.tool_call is not None]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["stats"] = self.stats.to_dict()
        out["usage"]["total_tokens"] = self.usage.total_tokens
        return out

    def trace(self) -> dict[str, Any]:
        """The run's trace in the one schema: `steps` (each `StepRecord.trace()`), `stats`,
        `usage`, `finish_reason`, `model`, `verifier`."""
        return {
            "model": self.model_name, "verifier": self.verifier, "finish_reason": self.finish_reason,
            "usage": {**asdict(self.usage), "total_tokens": self.usage.total_tokens},
            "stats": self.stats.to_dict(), "steps": [s.trace() for s in self.steps],
        }
