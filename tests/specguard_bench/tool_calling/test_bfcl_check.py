"""BFCL's AST rules on hand-made calls."""

from __future__ import annotations

import json
from typing import Any

from specguard_bench.tool_calling.bfcl_check import check_task, standardize
from specguard_bench.tool_calling.bfcl_data import BfclTask, parse_lines

PLAY = {"name": "spotify.play", "description": "Play an artist.", "parameters": {
    "type": "dict", "required": ["artist", "duration"], "properties": {
        "artist": {"type": "string"}, "duration": {"type": "integer"},
        "shuffle": {"type": "boolean"}, "volume": {"type": "float"},
        "genres": {"type": "array", "items": {"type": "string"}},
        "filters": {"type": "dict", "properties": {"year": {"type": "integer"},
                                                   "mood": {"type": "string"}}}}}}


def task(truth: list[dict[str, Any]] | None, task_id: str = "parallel_0") -> BfclTask:
    row = {"id": task_id, "question": [[{"role": "user", "content": "Play music."}]],
           "function": [PLAY, {"name": "stop", "parameters": {"type": "dict", "properties": {}}}],
           "ground_truth": truth}
    tasks, skipped = parse_lines([json.dumps(row)], "test")
    assert not skipped, skipped
    return tasks[0]


def one(**allowed: list[Any]) -> list[dict[str, Any]]:
    return [{"spotify.play": {"artist": ["Taylor Swift"], "duration": [20], **allowed}}]


def test_the_right_call_is_right_and_a_wrong_value_is_not() -> None:
    t = task(one())
    assert check_task(t, [("spotify.play", {"artist": "Taylor Swift", "duration": 20})]).correct
    wrong = check_task(t, [("spotify.play", {"artist": "Taylor Swift", "duration": 15})])
    assert not wrong.correct and "'duration' is 15" in (wrong.error or "")
    assert not check_task(t, [("stop", {})]).correct  # another function
    assert not check_task(t, []).correct and not check_task(t, [
        ("spotify.play", {"artist": "Taylor Swift", "duration": 20})] * 2).correct  # counts


def test_arguments_required_unknown_and_optional() -> None:
    t = task(one(shuffle=["", True], volume=[0.5]))
    base = {"artist": "Taylor Swift", "duration": 20, "volume": 0.5}
    assert check_task(t, [("spotify.play", base)]).correct  # shuffle omitted: "" allows it
    assert check_task(t, [("spotify.play", {**base, "shuffle": True})]).correct
    missing = check_task(t, [("spotify.play", {"artist": "Taylor Swift", "duration": 20})])
    assert "'volume' is missing" in (missing.error or "")  # no "": may not be omitted
    required = check_task(t, [("spotify.play", {"artist": "Taylor Swift", "volume": 0.5})])
    assert "missing required argument 'duration'" in (required.error or "")
    unknown = check_task(t, [("spotify.play", {**base, "loud": True})])
    assert "unexpected argument 'loud'" in (unknown.error or "")
    # declared in the doc but absent from the expected call: unexpected too (BFCL's rule)
    assert not check_task(t, [("spotify.play", {**base, "genres": ["pop"]})]).correct


def test_types_numbers_and_string_normalisation() -> None:
    t = task(one(volume=[0.5, 1.0]))
    ok = {"artist": "taylor-swift", "duration": 20}
    assert check_task(t, [("spotify.play", {**ok, "volume": 1})]).correct  # int for a float
    assert not check_task(t, [("spotify.play", {**ok, "duration": 20.0, "volume": 1.0})]).correct
    assert not check_task(t, [("spotify.play", {**ok, "duration": True, "volume": 1.0})]).correct
    assert check_task(t, [("spotify.play", {**ok, "artist": "TAYLOR SWIFT.", "volume": 1})]).correct
    assert not check_task(t, [("spotify.play", {**ok, "artist": "Taylor Swiftt", "volume": 1})]
                          ).correct
    assert standardize("April 1, 2024") == standardize("april 1 2024") == "april12024"
    assert standardize("x^2 * y_1/z-w.") == "x2y1zw"


def test_lists_element_wise_and_dicts_recursively() -> None:
    t = task(one(genres=[["Pop", "rock"]], filters=[{"year": [1989], "mood": ["", "happy"]}]))
    ok = {"artist": "Taylor Swift", "duration": 20, "genres": ["pop", "Rock"],
          "filters": {"year": 1989}}
    assert check_task(t, [("spotify.play", ok)]).correct  # mood may be left out of the dict
    assert check_task(t, [("spotify.play", {**ok, "filters": {"year": 1989, "mood": "Happy"}})]
                      ).correct
    for bad in ({"genres": ["rock", "pop"]}, {"genres": ["pop"]},
                {"filters": {"year": 1990}}, {"filters": {"year": 1989, "tempo": 3}},
                {"filters": {"mood": "happy"}}):
        assert not check_task(t, [("spotify.play", {**ok, **bad})]).correct, bad


def test_parallel_calls_match_in_any_order_one_to_one() -> None:
    truth = [{"spotify.play": {"artist": ["Maroon 5", "Taylor Swift"], "duration": [15, 20]}},
             {"spotify.play": {"artist": ["Taylor Swift"], "duration": [20]}}]
    t = task(truth)
    swift = ("spotify.play", {"artist": "Taylor Swift", "duration": 20})
    maroon = ("spotify.play", {"artist": "Maroon 5", "duration": 15})
    assert check_task(t, [maroon, swift]).correct
    # a greedy pick would give `swift` to the first expected call (which accepts both) and
    # leave the second unmatched; the matching gives each call the one expected call it fits
    assert check_task(t, [swift, maroon]).correct
    assert check_task(t, [swift, swift]).correct  # each expected call served by its own call
    assert not check_task(t, [maroon, maroon]).correct
    assert not check_task(t, [swift]).correct


def test_irrelevance_is_right_only_without_any_call() -> None:
    t = task(None, task_id="irrelevance_0")
    assert check_task(t, []).correct
    made = check_task(t, [("stop", {})])
    assert not made.correct and "1 call(s) made" in (made.error or "")
    assert not check_task(t, [], invalid=["unknown tool 'area'"]).correct
    # elsewhere an invalid call fails the task, whatever the valid ones are
    ok = task(one())
    assert not check_task(ok, [("spotify.play", {"artist": "Taylor Swift", "duration": 20})],
                          invalid=["unparseable tool call"]).correct
