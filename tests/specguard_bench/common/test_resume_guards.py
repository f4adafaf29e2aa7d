"""What a resumed benchmark trusts, through `specguard bench`: rows are reused only for the same
settings and the same problems, a pair stored twice counts once, one run at a time per `--out`,
and every damaged file it reads is one `error: <file>:<line>: ...` line with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.cli.parsers import main
from specguard_bench.common import engines
from specguard_bench.common.store import RESULTS, RUN, load_rows
from tests.specguard_bench.bench_helpers import local_engine, scripted_pair

PROBLEMS = [{"question": "Janet has 3 ducks.", "answer": "#### 18"},
            {"question": "What is 4 + 5?", "answer": "9"},
            {"question": "What is 2 * 8?", "answer": "16"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return local_engine(scripted_pair(tmp_path_factory.mktemp("tok")))


@pytest.fixture
def bench(engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[tuple[list[str], Path, Path]]:
    """(argv of a target-only run on a 2-problem file, the file, the output directory)."""
    loads: list[int] = []

    def load(*args: Any, **kwargs: Any) -> Any:
        loads.append(1)
        return engine

    monkeypatch.setattr(engines, "load_engine", load)
    data, out = tmp_path / "mine.jsonl", tmp_path / "run"
    write(data, PROBLEMS)
    yield (["bench", "--dataset-file", str(data), "--n", "2", "--methods", "specguard-balanced",
            "--max-new-tokens", "48", "--out", str(out), "--no-progress", "--no-warmup"],
           data, out)


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The run's stderr, checked to be exactly one `error:` line."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_changed_problem_is_not_resumed_but_new_problems_are(
        bench: tuple[list[str], Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv, data, out = bench
    assert main(argv) == 0
    before = load_rows(out / RESULTS)
    assert [r.uid for r in before] == ["mine/0", "mine/1"]
    assert main([*argv[:4], "3", *argv[5:]]) == 0  # one more problem: the two are reused
    assert [r.uid for r in load_rows(out / RESULTS)] == ["mine/0", "mine/1", "mine/2"]
    write(data, [PROBLEMS[0], {**PROBLEMS[1], "answer": "10"}, PROBLEMS[2]])
    capsys.readouterr()
    assert main(argv) == 2
    assert "problem mine/1 changed since its rows were written" in one_error(capsys)


def test_results_without_run_json_are_refused(
        bench: tuple[list[str], Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv, _, out = bench
    assert main(argv) == 0
    (out / RUN).unlink()
    capsys.readouterr()
    assert main([*argv, "--max-new-tokens", "64"]) == 2
    assert f"{out / RUN} is missing" in one_error(capsys)


def test_a_pair_stored_twice_counts_once(bench: tuple[list[str], Path, Path]) -> None:
    argv, _, out = bench
    assert main(argv) == 0
    lines = (out / RESULTS).read_text().splitlines()
    (out / RESULTS).write_text("\n".join([*lines, lines[0]]) + "\n")
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["specguard-balanced"]["n"] == 2 and summary["n_problems"] == 2


def test_a_second_run_on_the_same_out_is_an_error(
        bench: tuple[list[str], Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv, _, out = bench
    holder = subprocess.Popen(  # another run holding the directory
        [sys.executable, "-c", "import sys, time\n"
         "from specguard_bench.common.lock import out_lock\n"
         f"with out_lock(__import__('pathlib').Path({str(out)!r})):\n"
         "    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[3])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(argv) == 2
        assert f"is writing to {out}" in one_error(capsys)
        assert not (out / RESULTS).exists()
    finally:
        holder.communicate("")
    assert main(argv) == 0  # released when that run ended


@pytest.mark.parametrize(("damage", "where"), [
    (lambda out, data: _line(out / RESULTS, 0, "not json"), "results.jsonl:1: not valid JSON"),
    (lambda out, data: _line(out / RESULTS, 1, '{"uid": "mine/1", "method": "specguard-balanced"}'),
     "results.jsonl:2: dataset: Field required"),
    (lambda out, data: _edit_row(out / RESULTS, latency_s="slow"),
     "results.jsonl:1: latency_s: Input should be a valid number"),
    (lambda out, data: _line(out / RESULTS, 0, "[1, 2]"), "results.jsonl:1: a JSON list"),
    (lambda out, data: (out / RUN).write_text("{"), "run.json: not valid JSON"),
    (lambda out, data: (out / RUN).write_text("[]"), "run.json: holds a JSON list"),
    (lambda out, data: (out / "summary.json").write_text('{"environment": '),
     "summary.json: not valid JSON"),
    (lambda out, data: (out / "summary.json").write_text('{"environment": 3}'),
     "summary.json: its 'environment' is a JSON int"),
    (lambda out, data: data.write_bytes(data.read_bytes() + b'{"question": "caf\xe9"}\n'),
     "mine.jsonl:4: not UTF-8 text"),
    (lambda out, data: write(data, [PROBLEMS[0], {"question": "Q?", "answer": None}]),
     "mine.jsonl:2: the answer must be a non-empty string or a number, got null"),
    (lambda out, data: write(data, [{"question": "Q?", "answer": {"value": 3}}]),
     "mine.jsonl:1: the answer must be a non-empty string or a number, got a JSON object"),
    (lambda out, data: write(data, [{"question": None, "answer": "3"}]),
     "mine.jsonl:1: the question must be a non-empty string, got null"),
])
def test_every_damaged_file_is_one_error_line(
        bench: tuple[list[str], Path, Path], capsys: pytest.CaptureFixture[str],
        damage: Any, where: str) -> None:
    """After a whole run, one file is damaged; the resumed run (which has nothing left to run,
    so reads the stored rows, its run.json, the last summary and the dataset) says which."""
    argv, data, out = bench
    assert main(argv) == 0
    damage(out, data)
    capsys.readouterr()
    assert main(argv) == 2
    assert where in one_error(capsys)


def _line(path: Path, index: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[index] = text
    path.write_text("\n".join(lines) + "\n")


def _edit_row(path: Path, **values: Any) -> None:
    lines = path.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), **values})
    path.write_text("\n".join(lines) + "\n")


def test_a_damaged_bounds_file_is_one_error_line(
        bench: tuple[list[str], Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv, _, out = bench
    bounds = out.parent / "bounds.json"
    bounds.write_text(json.dumps({"confidence_min": "low", "confidence_max": 0.0,
                                  "grounding_min": 0.0, "grounding_max": 1.0}))
    assert main([*argv, "--bounds", str(bounds)]) == 2
    assert f"bounds file {bounds}: confidence_min: Input should be a valid number" in \
        one_error(capsys)
