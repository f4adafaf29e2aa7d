"""bench/calibrate end to end on a tiny random pair (2 problems), and the loading flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard_bench.cli.parsers import main
from specguard_bench.common.methods import METHODS
from specguard_bench.common.store import RESULTS, load_rows
from specguard_core.config import NormBounds


def test_bench_and_calibrate_end_to_end(bench_pair_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = bench_pair_dirs
    common = [
        "--draft",
        str(draft),
        "--target",
        str(target),
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--max-new-tokens",
        "16",
        "--no-progress",
    ]
    bounds = tmp_path / "bounds.json"
    assert main(["calibrate", "--n", "1", "--offset", "500", "--out", str(bounds), *common]) == 0
    fitted = NormBounds.load(bounds)

    out = tmp_path / "run"
    argv = [
        "bench",
        "--n",
        "2",
        "--out",
        str(out),
        "--bounds",
        str(bounds),
        "--set",
        "paper.k=3",
        "--set",
        "paper.fallback_k=2",
        "--set",
        "max_step_tokens=6",
        *common,
    ]
    assert main(argv) == 0
    rows = load_rows(out / RESULTS)
    assert sorted((r.uid, r.method) for r in rows) == sorted(
        (f"gsm8k/{i}", m) for i in range(2) for m in METHODS
    )
    for r in rows:
        assert r.latency_s > 0 and 0 < r.new_tokens <= 16 and r.prompt_tokens > 0
        if r.method.startswith("specguard"):
            assert r.steps and r.ideal_latency_s is not None
            assert 0 < r.ideal_latency_s < r.latency_s
            assert r.prefilled_draft is not None and r.prefilled_draft >= r.prompt_tokens
            assert r.step_trace is not None and len(r.step_trace) == r.steps
            assert sum(s["source"] == "target" for s in r.step_trace) == r.target_steps
            assert sum(s["tokens"] for s in r.step_trace) == r.new_tokens
        else:
            assert r.step_trace is None
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["methods"]) == list(METHODS)
    # paths outside the working directory are stored by name: no machine path in a summary
    assert summary["bounds"]["path"] == "bounds.json" and summary["bounds"]["calibrated"]
    assert summary["settings"]["out_dir"] == "run" and str(tmp_path) not in json.dumps(summary)
    assert NormBounds(**summary["bounds"]["values"]) == fitted
    assert summary["configs"]["specguard-paper"]["k"] == 3
    assert summary["configs"]["specguard-fast"]["max_step_tokens"] == 6
    assert summary["methods"]["target"]["speedup_vs_target"] == pytest.approx(1.0)
    by_step = summary["methods"]["specguard-fast"]["acceptance_by_step"]
    fast = [r for r in rows if r.method == "specguard-fast"]
    assert sum(n for _, n in by_step) == sum(r.scored_steps or 0 for r in fast)
    assert summary["methods"]["target"]["acceptance_by_step"] is None
    assert "| specguard-fast |" in (out / "results.md").read_text()
    assert (out / "results.png").stat().st_size > 0

    # resume: nothing left to run, same rows; other settings are refused
    assert main(argv) == 0
    assert len(load_rows(out / RESULTS)) == len(rows)
    assert main([*argv, "--max-new-tokens", "20"]) == 2


def test_loading_flags_reach_the_pair_and_the_runs_fingerprint(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from specguard_bench.common import engines
    from specguard_bench.common.store import RUN

    seen: list[engines.PairSettings] = []

    def stop(settings: engines.PairSettings, served: object = None) -> None:
        seen.append(settings)
        raise ValueError("stop here")

    monkeypatch.setattr(engines, "load_engine", stop)
    out = tmp_path / "run"
    argv = ["bench", "--n", "1", "--methods", "target", "--no-warmup", "--no-progress",
            "--out", str(out), "--device", "cpu", "--revision", "v9", "--draft-dtype",
            "float32"]
    assert main(argv) == 2 and "stop here" in capsys.readouterr().err
    (settings,) = seen
    assert (settings.device, settings.dtype) == ("cpu", "bfloat16")  # the bench's default dtype
    assert (settings.load.revision, settings.load.draft_dtype) == ("v9", "float32")
    run = json.loads((out / RUN).read_text())
    assert run["load"] == {"draft_dtype": "float32", "revision": "v9"}
    # a loader option of real models does not apply to random-weight ones
    assert main(["bench", "--synthetic", "--revision", "v9", "--out", str(tmp_path / "s")]) == 2
    assert "--revision load real models; --synthetic builds random-weight ones" in \
        capsys.readouterr().err


@pytest.mark.parametrize("command", [["bench", "--synthetic"], ["calibrate"]])
def test_a_bad_value_is_one_error_line(command: list[str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--set", "k=x", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == ("error: --set 'k=x': k: Input should be a valid integer, "
                                       "unable to parse string as an integer (got 'x')\n")
