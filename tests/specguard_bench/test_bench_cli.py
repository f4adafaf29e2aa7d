"""bench/calibrate end to end on a tiny random pair (2 problems), and the synthetic mode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specguard_bench.cli import main, parse_sets
from specguard_bench.methods import METHODS, specguard_config, split_overrides
from specguard_bench.store import RESULTS, load_rows
from specguard_core.config import NormBounds, SpecGuardConfig


def test_parse_sets_types_and_validation() -> None:
    sets = parse_sets(["k=4", "tau=-inf", "fast.tau=0.6", 'step_delimiters=["\\n"]'])
    assert sets == {"k": 4, "tau": -math.inf, "fast.tau": 0.6, "step_delimiters": ("\n",)}
    for bad in ["k", "nope=1", "k=0", "slow.k=2", "selector=other"]:
        with pytest.raises(ValueError):
            parse_sets([bad])


def test_overrides_scope_to_one_preset() -> None:
    sets = {"k": 4, "fast.k": 2, "paper.tau": 0.5}
    assert split_overrides(sets, "fast") == {"k": 2}
    assert split_overrides(sets, "paper") == {"k": 4, "tau": 0.5}
    cfg = specguard_config(
        SpecGuardConfig(),
        "specguard-paper",
        sets,
        max_new_tokens=9,
        bounds=NormBounds(confidence_min=-3.0),
    )
    assert (cfg.k, cfg.tau, cfg.fallback, cfg.max_new_tokens) == (4, 0.5, "sample", 9)
    assert cfg.bounds.confidence_min == -3.0


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
    assert summary["bounds"]["path"] == str(bounds) and summary["bounds"]["calibrated"]
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


def test_synthetic_mode(tmp_path: Path) -> None:
    argv = [
        "bench",
        "--synthetic",
        "--synthetic-size",
        "tiny",
        "--synthetic-prompts",
        "1",
        "--ks",
        "1,2",
        "--acceptance",
        "0.5,1.0",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    report = json.loads((tmp_path / "synthetic.json").read_text())
    steps, step_tokens = report["steps"], report["step_tokens"]
    assert report["new_tokens"] == steps * step_tokens
    assert [r["k"] for r in report["k_sweep"]] == [1, 2]
    for r in report["k_sweep"]:
        assert r["steps_per_run"] == steps and r["achieved"] == 1.0  # fixed-length steps
    full = report["acceptance"][1]
    assert full["requested"] == 1.0 and full["tau"] == -math.inf and full["achieved"] == 1.0
    assert 0.0 <= report["acceptance"][0]["achieved"] <= 1.0
    sweep = report["capture"]["layers_sweep"]
    assert sweep[0]["grounding_layers"] == 0 and len(sweep) >= 2  # capture off, then on
    assert report["target_latency_s"] > 0 and (tmp_path / "synthetic.png").stat().st_size > 0


def test_variants_and_balanced_configs() -> None:
    base = SpecGuardConfig()
    sd = specguard_config(base, "specguard-paper-sd", {"paper.k": 4}, max_new_tokens=50)
    paper = specguard_config(base, "specguard-paper", {}, max_new_tokens=50)
    assert sd.fallback == "speculative" and paper.fallback == "sample"
    assert sd.k == 4 and sd.fallback_k == paper.fallback_k == 16
    balanced = specguard_config(base, "specguard-balanced", {}, max_new_tokens=50)
    assert balanced.route == "check" and balanced.fallback == "speculative"
    # an override of tau alone is the two-way rule at that tau
    two_way = specguard_config(base, "specguard-balanced", {"balanced.tau": 0.6}, max_new_tokens=50)
    assert two_way.thresholds == (0.6, 0.6) and two_way.route == "score"


def test_loading_flags_reach_the_pair_and_the_runs_fingerprint(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from specguard_bench import engines
    from specguard_bench.store import RUN

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
