"""`specguard bench --suite agents` on scripted models: a calculator agent solving GSM8K problem
0 (Janet's ducks: 16 - 3 - 4 = 9, 9 * 2 = 18) through LangChain's `create_agent` and
LlamaIndex's `FunctionAgent`, an agent that loops until its turn limit, and invalid calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.cli.parsers import main
from specguard_bench.common import engines
from specguard_bench.common.store import RESULTS
from specguard_bench.tool_calling.names import AGENT_METHODS
from tests.specguard_bench.tool_helpers import hermes, scripted_engine

SOLVE = [hermes([("subtract", {"a": 16, "b": 3})]), hermes([("subtract", {"a": 13, "b": 4})]),
         hermes([("multiply", {"a": 9, "b": 2})]), "She makes 9 * 2 dollars: \\boxed{18}."]


def by_turn(script: list[str]) -> Callable[[str], str]:
    """Reply i of `script` once the prompt holds i tool results (the last reply after that)."""
    def reply(prompt: str) -> str:
        if "Janet" not in prompt:
            return "5"  # the warm-up
        return script[min(prompt.count("<tool_response>"), len(script) - 1)]
    return reply


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: list[str],
        *args: str) -> list[dict[str, Any]]:
    engine = scripted_engine(tmp_path / "tok", by_turn(script), by_turn(script))
    monkeypatch.setattr(engines, "load_engine", lambda *a, **k: engine)
    out = tmp_path / "run"
    assert main(["bench", "--suite", "agents", "--n", "1", "--out", str(out), "--no-progress",
                 *args]) == 0
    return [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]


def test_each_framework_solves_with_every_method(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rows = run(tmp_path, monkeypatch, SOLVE, "--turn-limit", "4")
    assert sorted((r["framework"], r["method"]) for r in rows) == sorted(
        (f, m) for f in ("langchain", "llama_index") for m in AGENT_METHODS)
    for r in rows:
        assert (r["end_state"], r["correct"], r["predicted"], r["gold"]) == (
            "answered", True, "18", "18"), r
        assert (r["model_turns"], r["tool_calls"], r["repeated_calls"], r["invalid_calls"]) == (
            4, 3, 0, 0)
        assert [c["name"] for t in r["turns"] for c in t["calls"]] == [
            "subtract", "subtract", "multiply"]
        assert all(t["step_trace"] for t in r["turns"]) and r["latency_s"] > 0
        assert (r["paths"] is None) == (r["method"] != "specguard-balanced")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["settings"]["out_dir"] == "run"  # never the machine's absolute path
    lc = summary["frameworks"]["langchain"]["specguard-balanced"]
    assert lc["end_states"] == {"answered": 1, "turn_limit": 0, "error": 0}
    assert "| llama_index | token-sd | 100.0% (1/1) | 1/0/0 | 4.0 | 3.0 | 0 | 0 |" in \
        (tmp_path / "run" / "results.md").read_text()
    assert (tmp_path / "run" / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_agent_that_loops_stops_at_its_turn_limit(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    loop = [hermes([("add", {"a": 1, "b": 1})])]
    rows = run(tmp_path, monkeypatch, loop, "--turn-limit", "3", "--methods",
               "target,token-sd")
    assert len(rows) == 4
    for r in rows:  # the framework raised inside the run: recorded, the run went on
        assert (r["end_state"], r["correct"], r["answer"]) == ("turn_limit", False, ""), r
        assert (r["model_turns"], r["tool_calls"], r["repeated_calls"]) == (3, 3, 2)
        assert "turn limit of 3" in r["error"]


def test_invalid_calls_are_counted_and_answered_by_the_framework(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = hermes([("subtract", {"a": 16})])  # `b` missing: fails the tool's schema
    rows = {r["framework"]: r for r in run(tmp_path, monkeypatch, [bad, *SOLVE], "--methods",
                                           "target", "--turn-limit", "6")}
    lc, li = rows["langchain"], rows["llama_index"]
    assert lc["invalid_calls"] == li["invalid_calls"] == 1
    assert lc["turns"][0]["invalid_calls"][0]["name"] == "subtract"
    # both frameworks send the call's error back to the model as a tool result, and the
    # script carries on to the answer
    for r in (lc, li):
        assert (r["end_state"], r["model_turns"], r["tool_calls"], r["correct"]) == (
            "answered", 5, 3, True)


def test_the_frameworks_own_limits_count_as_the_turn_limit() -> None:
    from langgraph.errors import GraphRecursionError
    from workflows.errors import WorkflowRuntimeError

    from specguard_bench.tool_calling.agents_bench import end_state
    from specguard_bench.tool_calling.chat_engine import TurnLimitReached

    assert end_state(GraphRecursionError("Recursion limit of 21 reached")) == "turn_limit"
    assert end_state(WorkflowRuntimeError("Max iterations of 10 reached! ...")) == "turn_limit"
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = TurnLimitReached("turn limit of 3 model turns reached")
    assert end_state(wrapped) == "turn_limit"
    assert end_state(ValueError("the chat template cannot render this")) == "error"


def test_the_expression_task_asks_for_the_chained_worked_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    asked = "Compute (16 - 3 - 4) * 2."

    def reply(prompt: str) -> str:
        if asked not in prompt:
            return "5"  # the warm-up
        return SOLVE[min(prompt.count("<tool_response>"), len(SOLVE) - 1)]

    engine = scripted_engine(tmp_path / "tok", reply, reply)
    monkeypatch.setattr(engines, "load_engine", lambda *a, **k: engine)
    out = tmp_path / "run"
    assert main(["bench", "--suite", "agents", "--agent-task", "expression", "--n", "1",
                 "--out", str(out), "--no-progress", "--turn-limit", "5"]) == 0
    rows = [json.loads(line) for line in (out / RESULTS).read_text().splitlines()]
    assert {r["uid"] for r in rows} == {"langchain/gsm8k-expression/0",
                                         "llama_index/gsm8k-expression/0"}
    assert all(r["correct"] and r["tool_calls"] == 3 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["agent_task"] == "expression"
    balanced = summary["frameworks"]["langchain"]["specguard-balanced"]
    assert balanced["as_target"] == {"compared": 1, "same_calls": 1, "choice_differs": 0}
    assert balanced["vs_token_sd"] > 0
    assert "1 GSM8K worked answers as expressions" in (out / "results.md").read_text()
    # a folder of the other task does not resume as this one
    assert main(["bench", "--suite", "agents", "--n", "1", "--out", str(out), "--no-progress",
                 "--turn-limit", "5"]) == 2
    assert "agent_task" in capsys.readouterr().err


def row(uid: str, method: str, turns: list[list[tuple[str, dict[str, int]]]]) -> dict[str, Any]:
    return {"uid": uid, "framework": "langchain", "method": method, "correct": True,
            "end_state": "answered", "model_turns": len(turns), "repeated_calls": 0,
            "invalid_calls": 0, "latency_s": 1.0, "new_tokens": 10, "paths": None,
            "tool_calls": sum(len(t) for t in turns),
            "turns": [{"calls": [{"name": n, "arguments": a} for n, a in t],
                       "invalid_calls": []} for t in turns]}


def test_calls_are_compared_with_the_targets_turn_by_turn() -> None:
    from specguard_bench.tool_calling.agents_report import summarize

    first, second = [("add", {"a": 1, "b": 2})], [("multiply", {"a": 3, "b": 3})]
    rows = [row("t/1", "target", [first, second, []]), row("t/2", "target", [[]]),
            row("t/3", "target", [first, []]),
            row("t/1", "token-sd", [first, second, []]), row("t/2", "token-sd", [first, []]),
            row("t/3", "token-sd", [[], first, []])]  # t/3: the same call a turn late
    s = summarize(rows, ["target", "token-sd"])["langchain"]
    assert s["target"]["as_target"] == {"compared": 3, "same_calls": 3, "choice_differs": 0}
    assert s["token-sd"]["as_target"] == {"compared": 3, "same_calls": 1, "choice_differs": 1}
