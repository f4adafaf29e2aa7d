"""The analysis scripts under benchmarks/ compute what they say (on hand-made rows)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(uid: str, method: str, tokens: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return dict(uid=uid, method=method, new_tokens=tokens, latency_s=seconds, **extra)


def test_token_costs_split_a_method_by_where_its_tokens_came_from() -> None:
    costs = _load("token_costs").costs
    trace = [dict(path="target-checked", tokens=30, verified_prefix=0),
             dict(path="target-verified", tokens=50, verified_prefix=20)]  # 30 fallback tokens
    rows = [_row("p/0", m, 80, s) for m, s in (("draft", 8.0), ("token-sd", 16.0),
                                                ("target", 32.0))]
    rows.append(_row("p/0", "sg", 80, 20.0, step_trace=trace, draft_wasted=7,
                     phase_s=dict(propose=9.0, target_check=1.0, fallback=9.5, prefill=0.5)))
    rows.append(_row("p/1", "draft", 10, 1.0))  # p/1 is unfinished by the others: left out
    table = costs(rows, "sg")
    assert table["problems"] == 1
    assert table["draft"] == dict(tokens=80, seconds=8.0)
    assert table["sg: draft-written, kept"] == dict(tokens=50, seconds=10.0)
    assert table["sg: fallback"] == dict(tokens=30, seconds=9.5)
    assert table["sg"] == dict(tokens=80, seconds=20.0) and table["draft_wasted_per_problem"] == 7
