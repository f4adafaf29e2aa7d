"""`specguard bench --suite bfcl` end to end on scripted models (2 tasks per category), resuming;
a file with a bad line; the baselines' real `generate` path on the tiny random pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.cli.parsers import main
from specguard_bench.common import engines
from specguard_bench.common.engines import PairSettings, load_engine
from specguard_bench.common.store import RESULTS
from specguard_bench.tool_calling.bfcl_data import load_categories
from specguard_bench.tool_calling.chat_engine import MethodEngine
from specguard_bench.tool_calling.names import BFCL_METHODS
from tests.fixtures import WEATHER
from tests.specguard_bench.tool_helpers import hermes, responder, right_calls, scripted_engine

TASKS, _ = load_categories(n=2)


def scripts() -> tuple[dict[str, str], dict[str, str]]:
    """Target: every task right (no call for irrelevance). Draft: a wrong value on
    simple_python_0, a call on irrelevance_0, the rest as the target."""
    target, draft = {}, {}
    for t in TASKS:
        question = t.messages[-1]["content"]
        target[question] = ("None of these functions can answer that." if t.ground_truth is None
                            else hermes(right_calls(t)))
        draft[question] = target[question]
        if t.task_id == "simple_python_0":
            draft[question] = hermes([("calculate_triangle_area", {"base": 11, "height": 5})])
        if t.task_id == "irrelevance_0":
            draft[question] = hermes([("determine_body_mass_index", {"weight": 1, "height": 2})])
    return target, draft


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    target, draft = scripts()
    return scripted_engine(tmp_path_factory.mktemp("tok"), responder(target), responder(draft))


def rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]


def test_bfcl_suite_scores_every_method_and_resumes(engine: Any, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    loads: list[Any] = []

    def load(*args: Any, **kwargs: Any) -> Any:
        loads.append(args)
        return engine

    monkeypatch.setattr(engines, "load_engine", load)
    out = tmp_path / "run"
    argv = ["bench", "--suite", "bfcl", "--n", "2", "--out", str(out), "--no-progress",
            "--no-warmup"]
    assert main(argv) == 0
    got = rows(out)
    assert len(got) == 10 * len(BFCL_METHODS) and len(loads) == 1
    assert engine.target.model.assisted == 10  # token-sd: the target generated with the draft
    by = {(r["task_id"], r["method"]): r for r in got}
    for method in BFCL_METHODS:  # the same chat-model interface and parser for every method
        assert by["parallel_0", method]["calls"] == [
            {"name": n, "arguments": a} for n, a in right_calls(TASKS[4])]
    wrong = by["simple_python_0", "draft"]
    assert not wrong["correct"] and "'base' is 11" in wrong["error"]
    assert not by["irrelevance_0", "draft"]["correct"] and by["irrelevance_0", "target"]["correct"]
    # the balanced preset's target check catches the draft's wrong value
    fixed = by["simple_python_0", "specguard-balanced"]
    assert fixed["correct"] and fixed["target_tokens"] > 0 and fixed["step_trace"]
    assert fixed["paths"]["target-checked"] >= 1 and by["simple_python_0", "target"]["paths"] is None
    summary = json.loads((out / "summary.json").read_text())
    cats = summary["categories"]
    assert list(cats) == ["simple_python", "multiple", "parallel", "parallel_multiple",
                          "irrelevance", "all"]
    assert cats["all"]["target"]["accuracy"] == 1.0 and cats["all"]["draft"]["n_correct"] == 8
    assert cats["parallel"]["target"]["calls"] == 4
    assert cats["parallel"]["target"]["invalid_call_rate"] == 0.0
    # beside the target: the draft's wrong value is another call; balanced makes the target's
    assert cats["simple_python"]["draft"]["as_target"] == {"compared": 2, "same_calls": 1,
                                                           "choice_differs": 0}
    assert cats["irrelevance"]["draft"]["as_target"]["choice_differs"] == 1  # it called
    assert cats["all"]["specguard-balanced"]["as_target"]["same_calls"] == 10
    assert cats["all"]["token-sd"]["vs_token_sd"] == 1.0
    table = (out / "results.md").read_text()
    assert "| simple_python | draft | 50.0% (1/2) | 0.0% (0/2) | 1/2 | 0 |" in table
    assert "| all | specguard-balanced | 100.0% (10/10) | 0.0% (0/12) | 10/10 | 0 |" in table
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # resumed: nothing runs again (the engine is not even loaded); one missing pair reruns
    assert main(argv) == 0 and len(rows(out)) == 10 * len(BFCL_METHODS) and len(loads) == 1
    kept = [line for line in (out / RESULTS).read_text().splitlines()
            if '"method": "draft"' not in line or '"simple_python_1"' not in line]
    (out / RESULTS).write_text("\n".join(kept) + "\n")
    assert main(argv) == 0 and len(rows(out)) == 10 * len(BFCL_METHODS) and len(loads) == 2
    # another setting is another run
    capsys.readouterr()
    assert main([*argv, "--max-new-tokens", "64"]) == 2
    assert "max_new_tokens differ" in capsys.readouterr().err


def test_a_dataset_file_with_a_bad_line_runs_the_rest(engine: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    monkeypatch.setattr(engines, "load_engine", lambda *a, **k: engine)
    src = Path(__file__).parents[3] / "specguard_bench" / "data" / "bfcl" / "simple_python.jsonl"
    lines = src.read_text().splitlines()[:2]
    bad = json.loads(lines[1])
    bad["function"][0]["parameters"]["properties"]["number"]["type"] = "int"
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad)]) + "\n")
    out = tmp_path / "run"
    assert main(["bench", "--suite", "bfcl", "--dataset-file", str(path), "--methods", "target",
                 "--out", str(out), "--no-progress", "--no-warmup"]) == 0
    err = capsys.readouterr().err
    assert f"{path}:2 (simple_python_1): function[0].parameters.properties.number.type: " \
           "unknown type 'int'" in err
    assert [(r["uid"], r["correct"]) for r in rows(out)] == [("mine/simple_python_0", True)]
    skipped = json.loads((out / "summary.json").read_text())["skipped"][0]
    assert (skipped["source"], skipped["line"]) == ("mine.jsonl", 2)  # no machine path stored
    assert "## Skipped lines" in (out / "results.md").read_text()
    assert main(["bench", "--suite", "bfcl", "--categories", "simple", "--out",
                 str(tmp_path / "x"), "--no-progress"]) == 2
    assert "unknown BFCL categories" in capsys.readouterr().err


def test_a_file_with_no_usable_task_or_a_damaged_row_is_an_error(
        engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing to run is an error, not an empty report with exit status 0; so is a file that
    is not UTF-8, and a stored row of the wrong shape: each one `error:` line naming the line."""
    monkeypatch.setattr(engines, "load_engine", lambda *a, **k: engine)
    path, out = tmp_path / "mine.jsonl", tmp_path / "run"
    argv = ["bench", "--suite", "bfcl", "--dataset-file", str(path), "--methods", "target",
            "--out", str(out), "--no-progress", "--no-warmup"]

    def error() -> str:
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        return lines[0]

    path.write_text('{"id": "x_0", "question": "nope"}\nnot json\n')
    assert main(argv) == 2
    assert error().startswith(f"error: {path}:1 (x_0): function: missing (and 1 more lines)")
    assert not (out / RESULTS).exists()
    path.write_bytes(b'{"id": "caf\xe9"}\n')
    assert main(argv) == 2 and f"{path}:1: not UTF-8 text" in error()
    src = Path(__file__).parents[3] / "specguard_bench" / "data" / "bfcl" / "simple_python.jsonl"
    path.write_text(src.read_text().splitlines()[0] + "\n")
    assert main(argv) == 0
    row = json.loads((out / RESULTS).read_text())
    (out / RESULTS).write_text(json.dumps({**row, "calls": "none"}) + "\n")
    capsys.readouterr()
    assert main(argv) == 2 and "results.jsonl:1: calls: Input should be a valid list" in error()


def test_baselines_generate_with_tools_on_a_real_pair(bench_pair_dirs: tuple[Path, Path]) -> None:
    draft, target = bench_pair_dirs
    pair = load_engine(PairSettings(draft=str(draft), target=str(target), device="cpu",
                                    dtype="float32", progress=False))
    cfg = pair.config.merged(max_new_tokens=6)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    out = {m: MethodEngine(pair, m).generate(messages, tools=[WEATHER], config=cfg)
           for m in ("target", "token-sd", "draft")}
    assert out["token-sd"].raw_text == out["target"].raw_text  # greedy assisted = the target's
    for method, result in out.items():
        assert 0 < result.usage.completion_tokens <= 6
        assert result.usage.prompt_tokens == len(pair.prompt_ids(messages, [WEATHER]))
        assert "".join(s.text for s in result.steps) == result.raw_text, method
        assert sum(len(s.token_ids) for s in result.steps) == result.usage.completion_tokens
    assert out["draft"].stats.draft_tokens == out["draft"].usage.completion_tokens


@pytest.mark.parametrize("bare", [False, True])
@pytest.mark.parametrize("method", ["target", "token-sd", "draft", "specguard-balanced"])
def test_without_parallel_calls_every_method_stops_after_its_first_call(
        tmp_path: Path, method: str, bare: bool) -> None:
    calls = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    two = "\n\n".join(json.dumps({"name": n, "arguments": a}) for n, a in calls) if bare \
        else hermes(calls)  # bare JSON calls have no closer to stop at
    engine = MethodEngine(scripted_engine(tmp_path, lambda p: two, lambda p: two), method)
    messages = [{"role": "user", "content": "Paris and Rome?"}]
    both = engine.generate(messages, tools=[WEATHER])
    one = engine.generate(messages, tools=[WEATHER], parallel_tool_calls=False)
    # a call without its closer ends the run whatever the flag: what follows is made up
    assert [c.arguments["city"] for c in both.tool_calls] == (["Paris"] if bare else
                                                               ["Paris", "Rome"])
    assert [c.arguments["city"] for c in one.tool_calls] == ["Paris"]
    assert one.finish_reason == both.finish_reason == "tool_calls"
    assert one.usage.completion_tokens <= both.usage.completion_tokens
    assert one.usage.completion_tokens == sum(len(s.token_ids) for s in one.steps)
    assert one.raw_text == "".join(s.text for s in one.steps)
