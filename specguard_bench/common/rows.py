"""One (problem, method) result: `ProblemRow`, one JSON line of `results.jsonl`, and the fields
it takes from a SpecGuard result (`specguard_fields`), the analytic ideal latency among them.

The field names are the stored format (`to_dict` / `from_dict`, which ignores keys it does not
know); the store and every report read rows through this class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pydantic import TypeAdapter

from specguard_core.types import GenerationResult, StepRecord


def ideal_latency(steps: Sequence[StepRecord]) -> float:
    """The analytic ideal latency of one SpecGuard run, from its per-step phase timings.

    Definition: the sum over committed steps of
      - `phase_s["propose"]` if the step is the draft's and was accepted (`step.accepted`),
      - `phase_s["fallback"]` otherwise (the target wrote the step),
    i.e. the run an oracle verifier would make: it pays only for the step that is kept, and
    nothing for selection, scoring, the draft's per-step catch-up prefill, or draft proposals that
    end up rejected. Phases missing from a step count as 0. The engine times the target's catch-up
    prefill inside "fallback", so the ideal includes it; the prompt prefill at the start of a run
    (RunStats.phase_time_s["prefill"]) belongs to no step and is excluded. Hence
    `wall_time / ideal_latency >= 1` up to the prompt prefill, and the ratio is the overhead factor
    of verification.
    """
    return sum(
        s.phase_s.get("propose", 0.0) if s.accepted else s.phase_s.get("fallback", 0.0)
        for s in steps
    )


@dataclass
class ProblemRow:
    """One (problem, method) result. SpecGuard-only fields are None for the baselines; for the
    baselines `prefilled_*` is the prompt length where the method's prefill is known."""

    uid: str
    dataset: str
    index: int
    method: str
    correct: bool
    predicted: str | None
    gold: str
    latency_s: float
    new_tokens: int
    prompt_tokens: int
    finish_reason: str
    text: str
    steps: int | None = None
    target_steps: int | None = None
    scored_steps: int | None = None
    accepted_steps: int | None = None
    draft_tokens: int | None = None
    target_tokens: int | None = None
    prefilled_draft: int | None = None
    prefilled_target: int | None = None
    kept_steps: int | None = None
    checked_steps: int | None = None
    regenerated_steps: int | None = None  # the draft's step not kept whole (either fallback)
    target_forwards: int | None = None
    draft_wasted: int | None = None
    phase_s: dict[str, float] = field(default_factory=dict)
    ideal_latency_s: float | None = None
    step_trace: list[dict[str, Any]] | None = None  # one `step_entry` per committed step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ProblemRow:
        """Inverse of `to_dict`, checked: a missing field or a value of the wrong type is a
        pydantic `ValidationError` (a ValueError); unknown keys are ignored (rows written by
        newer versions)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a JSON {type(data).__name__}, not a result row object")
        names = {f.name for f in fields(cls)}
        return _ROW.validate_python({k: v for k, v in data.items() if k in names})


_ROW = TypeAdapter(ProblemRow)


def step_entry(step: StepRecord) -> dict[str, Any]:
    """One committed step as stored in `ProblemRow.step_trace`: `StepRecord.trace()`."""
    return step.trace()


def specguard_fields(result: GenerationResult) -> dict[str, Any]:
    """The SpecGuard-specific `ProblemRow` fields of one engine result."""
    steps = result.steps
    stats = result.stats
    return dict(
        steps=len(steps),
        target_steps=sum(s.source == "target" for s in steps),
        scored_steps=sum(s.score is not None for s in steps),
        accepted_steps=sum(s.accepted for s in steps),
        draft_tokens=stats.draft_tokens,
        target_tokens=stats.target_tokens,
        prefilled_draft=stats.draft.prefilled,
        prefilled_target=stats.target.prefilled,
        kept_steps=stats.steps_kept,
        checked_steps=stats.steps_target_checked,
        regenerated_steps=stats.steps_regenerated,
        target_forwards=stats.target.forward_calls,
        draft_wasted=stats.draft_tokens_wasted,
        phase_s=dict(stats.phase_time_s),
        ideal_latency_s=ideal_latency(steps),
        step_trace=[step_entry(s) for s in steps],
    )
