"""`bench --concurrency`: N client threads on one engine, measured from recorded timings.

A scripted pair (real engine, deterministic models) runs the rounds; the figures are checked
against the stored per-request records they come from; the CLI runs once on the tiny random pair.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specguard_bench.cli.parsers import main
from specguard_bench.common.rows import ProblemRow
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import RESULTS, ResumeMismatch
from specguard_bench.concurrency.report import (
    PLOT,
    SUMMARY,
    TABLE,
    LevelSummary,
    percentile,
    summarize_rounds,
)
from specguard_bench.concurrency.rounds import (
    Request,
    Round,
    check_levels,
    concurrency_methods,
    load_rounds,
)
from specguard_bench.concurrency.run import ROUNDS, run_concurrency
from tests.specguard_bench.bench_helpers import local_engine, scripted_pair

METHODS = ("specguard-balanced", "specguard-fast")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return scripted_pair(tmp_path_factory.mktemp("tok"))


def _settings(out: Path, **kw: Any) -> BenchSettings:
    return BenchSettings(out_dir=out, n=4, methods=METHODS, max_new_tokens=96, progress=False, **kw)


def test_rounds_record_every_request_and_the_table_comes_from_them(
        pair: dict[str, Any], tmp_path: Path) -> None:
    engine = local_engine(pair)
    summary = run_concurrency(_settings(tmp_path), (4, 2), engine=engine)
    rounds = load_rounds(tmp_path / ROUNDS)
    assert sorted((r.method, r.concurrency) for r in rounds) == sorted(
        (m, n) for m in METHODS for n in (1, 2, 4))
    uids = [f"gsm8k/{i}" for i in range(4)]
    by_key = {(r.method, r.concurrency): r for r in rounds}
    for r in rounds:
        assert r.uids == uids and [q.row.uid for q in r.requests] == uids  # one per problem
        for q in r.requests:
            assert q.row.latency_s > 0 and q.row.new_tokens > 0 and q.row.steps
            assert 0 <= q.started_s < q.finished_s <= r.wall_s
            assert q.row.latency_s <= q.finished_s - q.started_s  # the call sits inside
            assert 0 <= q.client < r.concurrency
        one = by_key[r.method, 1]
        # the engine's promise: concurrent callers get exactly what serial calls would
        assert [q.row.text for q in r.requests] == [q.row.text for q in one.requests]
    for method in METHODS:
        serial = sorted(by_key[method, 1].requests, key=lambda q: q.started_s)
        assert all(b.started_s >= a.finished_s for a, b in zip(serial, serial[1:], strict=False))
        assert {q.client for q in serial} == {0}
        at_once = by_key[method, 4].requests
        # several requests were in flight at the same time
        assert any(a is not b and a.started_s < b.finished_s and b.started_s < a.finished_s
                   for a in at_once for b in at_once)
    # balanced keeps only what the target would write: the target's script, which solves #0
    balanced = by_key["specguard-balanced", 4].requests
    assert [q.row.correct for q in balanced] == [True, False, False, False]
    assert all(q.row.target_tokens for q in balanced)  # the draft's wrong step was replaced
    assert "maybe" not in balanced[0].row.text

    levels = [LevelSummary(**s) for s in summary["levels"]]
    assert [(s.method, s.concurrency) for s in levels] == [(m, n) for m in METHODS for n in (1, 2, 4)]
    for s in levels:
        r = by_key[s.method, s.concurrency]
        latencies = [q.row.latency_s for q in r.requests]
        assert s.requests == 4 and s.wall_s == r.wall_s
        assert s.new_tokens == sum(q.row.new_tokens for q in r.requests)
        assert s.tokens_per_s == pytest.approx(s.new_tokens / s.wall_s)
        assert min(latencies) <= s.latency_p50_s <= s.latency_p95_s <= max(latencies)
        assert s.latency_p95_s == pytest.approx(float(np.percentile(latencies, 95)))
        base = next(b for b in levels if b.method == s.method and b.concurrency == 1)
        if s.concurrency == 1:
            assert s.throughput_vs_1 is None and s.same_text_as_1 is None
        else:
            assert s.throughput_vs_1 == pytest.approx(s.tokens_per_s / base.tokens_per_s)
            assert s.p95_vs_1 == pytest.approx(s.latency_p95_s / base.latency_p95_s)
            assert s.same_text_as_1 == 4
    assert summary["settings"]["levels"] == [1, 2, 4] and summary["environment"]["device"] == "cpu"
    assert summary["environment"]["engine"] == {
        "class": "SpecGuardEngine", "engine_config": {
            "heterogeneous": False, "batching": False, "max_batch_rows": 16,
            "max_active_requests": 16, "batch_window_s": 0.05}}
    table = (tmp_path / TABLE).read_text()
    assert "| method | clients | requests |" in table and "| specguard-fast | 4 | 4 |" in table
    assert json.loads((tmp_path / SUMMARY).read_text())["table"] == summary["table"]
    assert (tmp_path / PLOT).stat().st_size > 0
    assert not (tmp_path / RESULTS).exists()  # the per-problem store is untouched

    # resume: a stopped run redoes only the rounds it lacks; other settings are refused
    lines = (tmp_path / ROUNDS).read_text().splitlines()
    (tmp_path / ROUNDS).write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])  # cut mid-line
    run_concurrency(_settings(tmp_path), (2, 4), engine=engine)
    redone = load_rounds(tmp_path / ROUNDS)
    assert len(redone) == 6 and (redone[-1].method, redone[-1].concurrency) == (
        rounds[-1].method, rounds[-1].concurrency)
    run_concurrency(_settings(tmp_path), (2, 4), engine=engine)
    assert len(load_rounds(tmp_path / ROUNDS)) == 6
    with pytest.raises(ResumeMismatch, match="max_new_tokens"):
        run_concurrency(BenchSettings(out_dir=tmp_path, n=4, methods=METHODS, max_new_tokens=50,
                                      progress=False), (2,), engine=engine)


def test_levels_and_methods_are_checked() -> None:
    assert check_levels((4, 2, 4), 4) == (1, 2, 4)
    with pytest.raises(ValueError, match=">= 1"):
        check_levels((0, 2), 8)
    with pytest.raises(ValueError, match="raise --n"):
        check_levels((8,), 4)
    assert concurrency_methods(["specguard-fast", "specguard-remote"], remote=True) == (
        "specguard-fast", "specguard-remote")
    with pytest.raises(ValueError, match="drop target"):
        concurrency_methods(["target", "specguard-fast"], remote=False)
    with pytest.raises(ValueError, match="--target-url"):
        concurrency_methods(["specguard-remote"], remote=False)


def _round(method: str, n: int, wall: float, latencies: list[float], texts: list[str]) -> Round:
    rows = [ProblemRow(uid=f"p/{i}", dataset="p", index=i, method=method, correct=i == 0,
                       predicted=None, gold="1", latency_s=lat, new_tokens=10, prompt_tokens=5,
                       finish_reason="stop", text=text)
            for i, (lat, text) in enumerate(zip(latencies, texts, strict=True))]
    return Round(method, n, [r.uid for r in rows], wall,
                 [Request(r, i % n, 0.0, wall) for i, r in enumerate(rows)])


def test_summaries_compare_with_level_one_of_the_same_method() -> None:
    rounds = [_round("m", 1, 4.0, [1.0, 1.0, 1.0, 1.0], ["a", "b", "c", "d"]),
              _round("m", 4, 2.0, [1.0, 2.0, 2.0, 2.0], ["a", "b", "x", "d"]),
              _round("k", 2, 1.0, [0.5, 0.5, 0.5, 0.5], ["a", "b", "c", "d"])]
    one, four, lone = summarize_rounds(rounds)
    assert (one.tokens_per_s, four.tokens_per_s) == (10.0, 20.0)
    assert four.throughput_vs_1 == 2.0 and four.p50_vs_1 == 2.0 and four.p95_vs_1 == 2.0
    assert four.same_text_as_1 == 3 and four.n_correct == 1
    assert lone.throughput_vs_1 is None and lone.same_text_as_1 is None  # no level-1 round
    assert Round.from_dict(json.loads(json.dumps(rounds[1].to_dict()))) == rounds[1]


def test_cli_concurrency_on_the_tiny_pair(bench_pair_dirs: tuple[Path, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = bench_pair_dirs
    common = ["--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype",
              "float32", "--max-new-tokens", "8", "--no-progress", "--out", str(tmp_path)]
    assert main(["bench", "--concurrency", "2", "--n", "2", "--methods", "specguard-balanced",
                 *common]) == 0
    summary = json.loads((tmp_path / SUMMARY).read_text())
    assert [(s["method"], s["concurrency"]) for s in summary["levels"]] == [
        ("specguard-balanced", 1), ("specguard-balanced", 2)]
    assert summary["levels"][1]["same_text_as_1"] == 2
    assert summary["settings"]["out_dir"] == tmp_path.name  # never the machine's absolute path
    assert not (tmp_path / RESULTS).exists()
    # bad requests are one-line errors (exit 2) before any model loads
    capsys.readouterr()
    assert main(["bench", "--concurrency", "2", "--n", "2", "--methods", "target", *common]) == 2
    assert "drop target from --methods" in capsys.readouterr().err
    assert main(["bench", "--concurrency", "4", "--n", "2", *common]) == 2
    assert "raise --n" in capsys.readouterr().err
    assert main(["bench", "--synthetic", "--concurrency", "2", *common]) == 2
    assert "do not apply to --synthetic" in capsys.readouterr().err


def test_cli_batching_builds_a_batching_engine(bench_pair_dirs: tuple[Path, Path],
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = bench_pair_dirs
    # long enough (24 tokens) that the two requests overlap even when a busy machine delays one
    # client's thread (with 6, the tiny models could finish one request before the other began)
    common = ["--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype",
              "float32", "--max-new-tokens", "24", "--no-progress", "--n", "2",
              "--methods", "specguard-fast", "--no-warmup"]
    out = tmp_path / "batched"
    assert main(["bench", "--concurrency", "2", "--batching", "--out", str(out), *common]) == 0
    summary = json.loads((out / SUMMARY).read_text())
    assert summary["environment"]["engine"]["engine_config"]["batching"] is True
    assert summary["settings"]["batching"] is True  # part of the fingerprint: never resumed
    by_level = {lv["concurrency"]: lv["rows_per_forward"] for lv in summary["levels"]}
    assert by_level[1] == 1.0 and by_level[2] > 1.0  # each round's own forwards
    rounds = [json.loads(line) for line in (out / "concurrency.jsonl").read_text().splitlines()]
    assert all(sum(r["row_counts"].values()) > 0 for r in rounds)
    assert "rows/forward" in (out / "concurrency.md").read_text()
    capsys.readouterr()  # ... by a run without it
    assert main(["bench", "--concurrency", "2", "--out", str(out), *common]) == 2
    assert "batching" in capsys.readouterr().err
    assert main(["bench", "--synthetic", "--batching", "--out", str(tmp_path / "s")]) == 2
    assert "--batching" in capsys.readouterr().err
    assert main(["bench", "--concurrency", "2", "--max-batch-rows", "32", "--out",
                 str(tmp_path / "r"), *common]) == 2
    assert "add --batching" in capsys.readouterr().err
    rows = tmp_path / "rows"
    assert main(["bench", "--concurrency", "2", "--batching", "--max-batch-rows", "32", "--out",
                 str(rows), *common]) == 0
    summary = json.loads((rows / SUMMARY).read_text())
    assert summary["environment"]["engine"]["engine_config"]["max_batch_rows"] == 32
    assert summary["settings"]["max_batch_rows"] == 32


def test_latency_percentiles_interpolate_between_order_statistics() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
