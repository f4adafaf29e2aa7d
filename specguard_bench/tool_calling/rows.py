"""The rows the tool-calling suites store in `results.jsonl` (`BfclRow`, `AgentRow`): one JSON
object per (task, method), with the fields and types each suite's report reads. A stored row is
checked against its suite's shape as it is read back (`row_parser`), so a damaged
`results.jsonl` is one error naming its line, never a traceback in the middle of a report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict


class BfclRow(TypedDict):
    """One BFCL (task, method) result (`bfcl_bench.task_row`)."""

    uid: str
    category: str
    task_id: str
    index: int
    method: str
    correct: bool
    error: str | None
    latency_s: float
    calls: list[dict[str, Any]]
    invalid_calls: list[dict[str, Any]]
    new_tokens: int
    prompt_tokens: int
    finish_reason: str
    text: str
    paths: dict[str, int] | None
    draft_tokens: int | None
    target_tokens: int | None
    step_trace: list[dict[str, Any]] | None


class AgentRow(TypedDict):
    """One agent (task, method) result (`agents_bench.run_task`)."""

    uid: str
    framework: str
    dataset: str
    index: int
    method: str
    gold: str
    correct: bool
    predicted: str | None
    answer: str
    end_state: str
    error: str | None
    model_turns: int
    latency_s: float
    tool_calls: int
    repeated_calls: int
    invalid_calls: int
    new_tokens: int
    prompt_tokens: int
    paths: dict[str, int] | None
    turns: list[dict[str, Any]]


def row_parser(row_type: type[Any]) -> Callable[[Any], dict[str, Any]]:
    """A stored row (one JSON line) checked against `row_type`: the row itself, or a pydantic
    `ValidationError` (a ValueError) saying which field is missing or of the wrong type."""
    adapter: TypeAdapter[Any] = TypeAdapter(row_type)

    def parse(data: Any) -> dict[str, Any]:
        adapter.validate_python(data)
        return dict(data)

    return parse
