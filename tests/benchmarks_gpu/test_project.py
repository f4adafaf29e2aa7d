"""`benchmarks/gpu/project.py` and `replay.py` on a synthetic trace with hand-computed costs: the
replay charges what each step did, and the calibration check passes within its tolerance and
fails beyond it."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu import project
from benchmarks.gpu.replay import MethodSettings, ModelCosts, interp, replay_specguard, sd_rates

# the draft: a decode 0.1 s (0.4 s for 4 rows), a pass over 8 tokens 0.3 s, a proposed token 0.15 s
DRAFT = dict(eager=dict(decode={"100": {"1": 0.1, "4": 0.4}, "300": {"1": 0.1, "4": 0.4}},
                        pass_={"100": {"8": 0.3}}, propose_per_token={"100": {"1": 0.15}},
                        prefill={"100": 0.5, "200": 1.0}))
# the target: a decode 0.3 s (0.6 s for 4 rows), a pass over T tokens 0.3 + 0.1 (T - 1) s
TARGET = dict(eager=dict(decode={"100": {"1": 0.3, "4": 0.6}}, pass_={"100": {"8": 1.0}},
                         prefill={"100": 2.0}))
for entry in (DRAFT, TARGET):
    entry["eager"]["pass"] = entry["eager"].pop("pass_")


def _step(path: str, tokens: int, written: int, wasted: int, passes: int, target: int = 0,
          verified: int = 0, k: int = 1) -> dict[str, Any]:
    return dict(path=path, tokens=tokens, draft_written=written, draft_wasted=wasted,
                target_passes=passes, target_written=target, verified_prefix=verified,
                n_candidates=k)


TRACE = [
    _step("kept", 10, 10, 0, 0),  # draft 10 x 0.15; the target has not seen these 10 tokens
    _step("target-verified", 12, 9, 4, 2, target=3, verified=5),  # draft 13 x 0.15; the target's
    # prompt prefill 2.0, then 2 passes over (10 pending + 12 + 4 rejected) / 2 = 13 tokens: 2 x 1.5
    _step("regenerated", 5, 0, 6, 6, target=5),  # draft 6 x 0.15; 6 decodes of 4 rows: 6 x 0.6
    _step("kept", 4, 4, 0, 0),  # the draft catches up 5 target tokens (0.1 + 4 x 0.2 / 7), 4 x 0.15
    _step("kept", 8, 8, 24, 0, k=4),  # 32 tokens over 4 rows: 8 decodes of 4 rows, 8 x 0.4
]
EXPECTED = dict(prefill=0.5 + 2.0, draft=1.5 + 1.95 + 0.9 + 0.6 + 3.2,
                draft_catch_up=0.1 + 4 * 0.2 / 7, target=2 * 1.5 + 6 * 0.6)
SG = sum(EXPECTED.values())
TARGET_ROW = 2.0 + 4 * 0.3  # prefill, then 4 decodes for 5 new tokens


def test_interpolation_holds_below_and_extrapolates_above() -> None:
    points = {8.0: 1.0, 16.0: 2.0}
    assert interp(points, 4) == 1.0 and interp(points, 12) == 1.5 and interp(points, 32) == 4.0
    assert interp({1.0: 0.2}, 99) == 0.2
    with pytest.raises(ValueError, match="no measured points"):
        interp({}, 1)


def test_each_step_is_charged_what_it_did() -> None:
    got = replay_specguard(dict(prompt_tokens=100, step_trace=TRACE), ModelCosts(DRAFT),
                           ModelCosts(TARGET), MethodSettings("sample", 4))
    assert got == pytest.approx(EXPECTED)
    rates = sd_rates([dict(step_trace=TRACE)])  # only the one-row speculative-fallback step
    assert rates is not None and (rates.tokens_per_pass, rates.draft_per_pass) == (6.0, 6.5)


def _run(root: Path, name: str, sg_latency: float) -> Path:
    run = root / name
    run.mkdir()
    rows = [dict(uid="p/0", method="specguard-paper", prompt_tokens=100, new_tokens=39,
                 latency_s=sg_latency, step_trace=TRACE),
            dict(uid="p/0", method="target", prompt_tokens=100, new_tokens=5,
                 latency_s=TARGET_ROW * 0.97),
            dict(uid="p/0", method="token-sd", prompt_tokens=100, new_tokens=30,
                 latency_s=100.0)]  # an estimate: reported, never checked
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "run.json").write_text(json.dumps(dict(presets={"paper": dict(fallback="sample",
                                                                          fallback_k=4)})))
    return run


def _costs(root: Path) -> Path:
    path = root / "costs.json"
    path.write_text(json.dumps(dict(machine=dict(device_name="synthetic"),
                                    models=dict(d=DRAFT, t=TARGET),
                                    pairs={"d/t": dict(draft="d", target="t")})))
    return path


def test_the_calibration_check_passes_within_and_fails_beyond_its_tolerance(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    costs = _costs(tmp_path)
    close, far = _run(tmp_path, "close", SG * 1.05), _run(tmp_path, "far", SG * 1.3)
    out = tmp_path / "out"
    assert project.main(["--costs", str(costs), "--check-against", str(close),
                         "--out", str(out)]) == 0
    assert "calibration ok" in capsys.readouterr().out
    result = json.loads((out / "projection.json").read_text())["results"][0]
    methods = result["methods"]
    assert methods["specguard-paper"]["projected_s"] == pytest.approx(SG)
    assert methods["target"]["projected_s"] == pytest.approx(TARGET_ROW)
    # token-SD at the trace's rates: 5 passes of 7.5 tokens and 32.5 draft decodes, + 2 prefills
    assert methods["token-sd"]["projected_s"] == pytest.approx(2.5 + 32.5 * 0.1 + 5 * 0.95)
    assert methods["token-sd"]["estimated"] is True
    assert methods["specguard-paper"]["speedup_vs_target"] == pytest.approx(TARGET_ROW / SG)
    assert project.main(["--costs", str(costs), "--check-against", str(far)]) == 1
    err = capsys.readouterr().err
    assert "specguard-paper" in err and "-23.1%" in err and "token-sd" not in err


def test_a_run_stored_compressed_replays_as_it_was_written(tmp_path: Path) -> None:
    plain = _run(tmp_path, "plain", SG)
    stored = _run(tmp_path, "stored", SG)  # as benchmarks/results/ keeps a run: results.jsonl.xz
    rows = stored / "results.jsonl"
    with lzma.open(rows.with_name("results.jsonl.xz"), "wt") as f:
        f.write(rows.read_text())
    rows.unlink()
    assert project.load_run(stored) == project.load_run(plain)
    assert len(project.load_run(stored)[0]) == 3


def test_the_recorded_runs_the_check_replays_are_in_the_tree() -> None:
    for run in project.DEFAULT_RUNS:
        rows, meta = project.load_run(run)
        assert rows and meta["presets"], run
        assert any(r.get("step_trace") for r in rows), run


def test_a_variant_takes_its_presets_fallback_and_bad_input_is_named(tmp_path: Path) -> None:
    meta = dict(presets={"paper": dict(fallback="sample", fallback_k=16)},
                variants={"paper-sd": ["paper", {"fallback": "speculative"}]})
    assert project.settings_of("specguard-paper-sd", meta) == MethodSettings("speculative", 16)
    assert project.settings_of("specguard-fast", {}) == MethodSettings("speculative", 1)
    with pytest.raises(ValueError, match="has no results.jsonl"):
        project.load_run(tmp_path)
    with pytest.raises(SystemExit):
        project.main(["--costs", str(_costs(tmp_path)), "--pairs", "no/such"])
