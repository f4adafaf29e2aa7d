"""Ideal latency on hand-made step timings, summaries, speed-ups, tables, resume bookkeeping
(the rows, the metrics, the store and the settings' fingerprint)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.common.metrics import acceptance_by_step, markdown_table, speedup, summarize
from specguard_bench.common.rows import ProblemRow, ideal_latency, step_entry
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import (
    RESULTS,
    ResumeMismatch,
    append_row,
    check_resume,
    load_rows,
    pending_pairs,
    stored_path,
)
from specguard_bench.reasoning.problems import Problem
from specguard_core.config import PRESETS
from specguard_core.types import StepRecord


def step(i: int, accepted: bool, **phases: float) -> StepRecord:
    return StepRecord(
        index=i,
        text="x",
        token_ids=[1, 2],
        source="draft" if accepted else "target",
        kind="reasoning",
        confidence=-1.0,
        grounding=0.5,
        score=0.6,
        accepted=accepted,
        n_candidates=4,
        latency_s=sum(phases.values()),
        phase_s=dict(phases),
    )


def test_ideal_latency_counts_only_the_kept_step() -> None:
    steps = [
        step(0, True, catch_up=0.01, propose=0.20, select=0.02, score=0.03),
        step(1, False, catch_up=0.01, propose=0.25, select=0.02, score=0.03, fallback=0.90),
        step(2, True, propose=0.30, select=0.01, score=0.01),
    ]
    assert ideal_latency(steps) == pytest.approx(0.20 + 0.90 + 0.30)
    assert ideal_latency(steps) < sum(s.latency_s for s in steps)


def test_ideal_latency_edge_cases() -> None:
    assert ideal_latency([]) == 0.0
    # a forced target step (no draft proposal) and a draft step without phase data
    assert ideal_latency([step(0, False, fallback=0.5), step(1, True)]) == pytest.approx(0.5)


def row(uid: str, method: str, latency: float, correct: bool = True, **extra: Any) -> ProblemRow:
    return ProblemRow(
        uid=uid,
        dataset="gsm8k",
        index=int(uid.split("/")[1]),
        method=method,
        correct=correct,
        predicted="1",
        gold="1",
        latency_s=latency,
        new_tokens=100,
        prompt_tokens=50,
        finish_reason=extra.pop("finish_reason", "stop"),
        text="",
        **extra,
    )


def sg_row(uid: str, latency: float, correct: bool) -> ProblemRow:
    return row(
        uid,
        "specguard-fast",
        latency,
        correct,
        steps=4,
        target_steps=1,
        scored_steps=4,
        accepted_steps=3,
        draft_tokens=75,
        target_tokens=25,
        prefilled_draft=80,
        prefilled_target=120,
        phase_s={"propose": 1.0, "select": 0.1, "score": 0.1, "fallback": 0.5},
        ideal_latency_s=latency / 2,
    )


ROWS = [
    row("gsm8k/0", "target", 4.0),
    row("gsm8k/1", "target", 6.0, False, finish_reason="length"),
    row("gsm8k/0", "token-sd", 3.0),
    row("gsm8k/1", "token-sd", 3.0),
    sg_row("gsm8k/0", 2.0, True),
    sg_row("gsm8k/1", 3.0, True),
]


def test_summarize_aggregates() -> None:
    s = summarize(ROWS, ["target", "token-sd", "specguard-fast", "draft"])
    assert list(s) == ["target", "token-sd", "specguard-fast"]  # no rows, no summary
    t, sg = s["target"], s["specguard-fast"]
    assert (t.n, t.n_correct, t.accuracy, t.truncated) == (2, 1, 0.5, 1)
    assert t.latency_median_s == 5.0 and t.tokens_per_s == pytest.approx(200 / 10)
    assert t.target_token_fraction == 1.0 and t.acceptance_rate is None
    assert sg.accuracy == 1.0
    assert sg.target_step_fraction == pytest.approx(2 / 8)
    assert sg.target_token_fraction == pytest.approx(50 / 200)
    assert sg.acceptance_rate == pytest.approx(6 / 8)
    assert sg.overhead_share == pytest.approx(0.4 / 5.0)
    assert sg.prefilled_draft_mean == 80 and sg.prefilled_target_mean == 120
    assert sg.measured_over_ideal == pytest.approx(2.0)
    assert sg.speedup_vs_target == pytest.approx(10 / 5)
    assert sg.speedup_vs_token_sd == pytest.approx(6 / 5)
    assert s["token-sd"].target_token_fraction is None


def test_speedup_uses_common_problems_only() -> None:
    rows = [
        row("gsm8k/0", "target", 4.0),
        row("gsm8k/1", "target", 100.0),
        row("gsm8k/0", "draft", 2.0),
    ]
    assert speedup(rows, "draft", "target") == pytest.approx(2.0)
    assert speedup(rows, "draft", "token-sd") is None


def test_markdown_table_has_a_row_per_method() -> None:
    table = markdown_table(summarize(ROWS, ["target", "token-sd", "specguard-fast"]))
    lines = table.strip().splitlines()
    assert len(lines) == 5 and all(line.count("|") == lines[0].count("|") for line in lines)
    assert "| specguard-fast | 100.0% (2/2) |" in table and "2.00x" in table


def test_rows_round_trip_and_resume_bookkeeping(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    for r in ROWS:
        append_row(path, r)
    with open(path, "a") as out:
        out.write('{"uid": "gsm8k/2", "meth')  # a run killed mid-write
    assert load_rows(path) == ROWS
    problems = [Problem(f"gsm8k/{i}", "gsm8k", i, "q", "1") for i in range(3)]
    done = {(r.uid, r.method) for r in ROWS}
    todo = pending_pairs(problems, ("target", "token-sd", "specguard-fast"), done)
    assert todo == [
        (problems[2], "specguard-fast"),
        (problems[2], "target"),
        (problems[2], "token-sd"),
    ]  # rotated start for the third problem


def test_load_rows_rejects_corruption_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    path.write_text("not json\n" + json.dumps(ROWS[0].to_dict()) + "\n")
    with pytest.raises(ValueError):
        load_rows(path)


def test_check_resume_refuses_other_settings(tmp_path: Path) -> None:
    check_resume(tmp_path, {"max_new_tokens": 10, "sets": {}})
    (tmp_path / RESULTS).write_text("")
    check_resume(tmp_path, {"max_new_tokens": 10, "sets": {}})  # same settings: fine
    with pytest.raises(ResumeMismatch, match="max_new_tokens"):
        check_resume(tmp_path, {"max_new_tokens": 20, "sets": {}})


def test_a_preset_change_refuses_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = BenchSettings(out_dir=tmp_path)
    check_resume(tmp_path, settings.fingerprint(None))
    (tmp_path / RESULTS).write_text("")
    changed = {**PRESETS, "fast": {**PRESETS["fast"], "tau": 0.5}}
    monkeypatch.setattr("specguard_bench.common.settings.PRESETS", changed)
    with pytest.raises(ResumeMismatch, match="presets"):
        check_resume(tmp_path, settings.fingerprint(None))


def test_only_the_presets_a_run_uses_bind_its_resume(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings = BenchSettings(out_dir=tmp_path, methods=("target", "specguard-balanced-typical"))
    first = settings.fingerprint(None)
    assert set(first["presets"]) == {"balanced"} and set(first["variants"]) == {"balanced-typical"}
    check_resume(tmp_path, first)
    (tmp_path / RESULTS).write_text("")
    changed = {**PRESETS, "fast": {**PRESETS["fast"], "tau": 0.5}}  # a preset the run does not use
    monkeypatch.setattr("specguard_bench.common.settings.PRESETS", changed)
    check_resume(tmp_path, settings.fingerprint(None))
    grown = BenchSettings(out_dir=tmp_path, methods=(*settings.methods, "specguard-fast"))
    check_resume(tmp_path, grown.fingerprint(None))  # a resumed run may gain a method
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert set(recorded["presets"]) == {"balanced", "fast"}
    monkeypatch.setattr("specguard_bench.common.settings.PRESETS", PRESETS)  # fast as it was: refused
    with pytest.raises(ResumeMismatch, match="presets"):
        check_resume(tmp_path, grown.fingerprint(None))


def test_a_run_recorded_with_every_preset_still_resumes(tmp_path: Path) -> None:
    settings = BenchSettings(out_dir=tmp_path, methods=("target", "specguard-balanced"))
    full = {**settings.fingerprint(None),
            "presets": {name: dict(sorted(v.items())) for name, v in PRESETS.items()}}
    check_resume(tmp_path, full)
    (tmp_path / RESULTS).write_text("")
    check_resume(tmp_path, settings.fingerprint(None))


def test_acceptance_by_step_counts_scored_steps_per_index() -> None:
    first = [step(0, True), step(1, False), step(2, True)]
    second = [step(0, False), step(1, True)]
    forced = replace(step(0, False), score=None)  # a forced target step is not scored
    rows = [row("gsm8k/0", "specguard-fast", 1.0, step_trace=[step_entry(s) for s in first]),
            row("gsm8k/1", "specguard-fast", 1.0, step_trace=[step_entry(s) for s in second]),
            row("gsm8k/2", "specguard-fast", 1.0, step_trace=[step_entry(forced)]),
            row("gsm8k/3", "specguard-fast", 1.0)]  # an older row without a trace
    assert acceptance_by_step(rows) == [[1, 2], [1, 2], [1, 1]]
    assert acceptance_by_step(rows[3:]) is None
    summary = summarize(rows, ["specguard-fast"])["specguard-fast"]
    assert summary.acceptance_by_step == [[1, 2], [1, 2], [1, 1]]
    entry = step_entry(first[1])
    assert entry["source"] == "target" and entry["tokens"] == 2 and entry["phase_s"] == {}


def test_path_columns_and_tokens_per_target_forward() -> None:
    base = dict(dataset="gsm8k", index=0, correct=True, predicted="1", gold="1", latency_s=2.0,
                prompt_tokens=10, finish_reason="stop", text="x")
    rows = [
        ProblemRow(uid="gsm8k/0", method="target", new_tokens=40, **base),
        ProblemRow(uid="gsm8k/0", method="specguard-balanced", new_tokens=40, kept_steps=1,
                   checked_steps=3, regenerated_steps=2, target_forwards=8, draft_wasted=12,
                   **base),
    ]
    s = summarize(rows, ["target", "specguard-balanced"])
    assert s["target"].tokens_per_target_forward == 1.0
    assert s["specguard-balanced"].tokens_per_target_forward == pytest.approx(5.0)
    table = markdown_table(s)
    assert "kept/checked/regen steps" in table and "| 1/3/2 | 5.00 | 12 |" in table


def test_append_after_a_cut_line_drops_it(tmp_path: Path) -> None:
    """A run killed mid-line leaves a cut last line; the next append must not glue onto it (the
    row would be lost and the file unreadable once another line follows)."""
    path = tmp_path / RESULTS
    append_row(path, ROWS[0])
    path.write_text(path.read_text() + json.dumps(ROWS[1].to_dict())[:30])
    assert load_rows(path) == [ROWS[0]]  # the cut line is skipped
    append_row(path, ROWS[1])
    append_row(path, ROWS[2])
    assert load_rows(path) == [ROWS[0], ROWS[1], ROWS[2]]


def test_stored_paths_are_never_a_machines_absolute_path(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    monkeypatch.chdir(repo)
    assert stored_path(repo / "benchmarks" / "results" / "run") == "benchmarks/results/run"
    assert stored_path("benchmarks/bounds.json") == "benchmarks/bounds.json"  # relative: as given
    assert stored_path(tmp_path / "elsewhere" / "run-1") == "run-1"  # outside: its name alone
