"""The analysis scripts under benchmarks/ compute what they say (on hand-made rows)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
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
    # a run of token-SD and the method only (no draft or target rows): those baselines are left out
    only = [r for r in rows if r["method"] in ("token-sd", "sg")]
    assert "draft" not in costs(only, "sg") and costs(only, "sg")["problems"] == 1
    with pytest.raises(ValueError, match="needs token-sd"):
        costs([r for r in rows if r["method"] != "token-sd"], "sg")


def test_sd_run_policies_replay_counts_drafts_and_passes() -> None:
    sd = _load("sd_run_policies")
    # adaptive, first run 5: drafts positions 0-4, the target keeps 0-1 and writes 2 itself; the
    # next run (4 long) reaches the end of the text after 2 tokens, both kept
    assert sd.replay([True, True, False, True, True], [0.9] * 5, sd.Rule("a")) == (7, 2, 3)
    # the run's probability product: 0.9^4 = 0.66 < 0.7 ends each run after 4 tokens, all kept,
    # so each pass commits 5 tokens
    assert sd.replay([True] * 20, [0.9] * 20, sd.Rule("c", run_confidence=0.7)) == (16, 4, 0)
    # transformers' rule: a run ends at a token below its threshold (0.4 here, before any refit):
    # positions 0-1 drafted and kept, the target writes 2, the next run drafts 3-5
    assert sd.replay([True] * 6, [0.9, 0.3, 0.9, 0.9, 0.9, 0.9],
                     sd.Rule("hf", kind="hf", start=20, confidence=0.4)) == (5, 2, 0)
    c = sd.cost([{"match": [True] * 20, "pmax": [0.9] * 20}],
                sd.Rule("c", run_confidence=0.7), draft_s=0.1, target_s=0.3)
    assert abs(c["s_per_problem"] - (16 * 0.1 + 4 * 0.3)) < 1e-9 and c["wasted_per_problem"] == 0


def test_sd_run_policies_replays_the_check_while_the_draft_writes() -> None:
    sd = _load("sd_run_policies")
    # one step of 20 tokens, all the target's: runs of 16 and 4, one pass each, nothing wasted
    rule = sd.CheckRule("check 16")
    assert sd.replay_check([True] * 20, [0.9] * 20, [], rule) == (20, 2, 0)
    # refused at position 3: the run drafted 16, kept 3, the pass gives position 3; the fallback
    # (0.9^4 < 0.7 ends its runs at 4, each pass adding the target's next token) writes positions
    # 4-19: runs 4-7, 9-12, 14-17 and 19
    drafted, passes, wasted = sd.replay_check([True] * 3 + [False] + [True] * 16, [0.9] * 20, [],
                                              rule)
    assert (drafted, passes, wasted) == (16 + 13, 1 + 4, 13)
    # two steps (the first ends after position 9): the check starts again at the step's start
    assert sd.replay_check([True] * 20, [0.9] * 20, [9], rule) == (20, 2, 0)
    # check_run_below 0.7 ends each run after 4 tokens (0.9^4 = 0.66)
    assert sd.replay_check([True] * 8, [0.9] * 8, [], sd.CheckRule("r", run_below=0.7)) == (8, 2, 0)


def test_omp_threads_times_each_setting(tmp_path: Path) -> None:
    from specguard_core.cache.handle import ModelHandle
    from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

    omp = _load("omp_threads")
    draft, tok, _, _ = noisy_copy_pair(tmp_path)
    handle = ModelHandle(draft, tok)
    seconds = {s: omp.measure(handle, s, length=12, repeats=1, threads=2) for s in omp.SETTINGS}
    assert all(s > 0 for s in seconds.values())
    assert omp.table(seconds).count("\n") == len(omp.SETTINGS) + 1
    states = omp.decode_states(handle, 12, rows=3)
    omp.one_decode(handle, states)()  # one decode, then cut back: the caches are as they were
    assert all(s.cache is not None and s.cache.get_seq_length() == 12 for s in states)
    with pytest.raises(ValueError, match="unknown setting"):
        omp.measure(handle, "two threads")


def test_openai_sdk_overhead_compares_clients_that_send_and_read_the_same() -> None:
    for name in ("openai", "fastapi", "uvicorn"):
        pytest.importorskip(name)
    import json

    import httpx

    bench = _load("openai_sdk_overhead")
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=bench.RAW["write4x256"],
                              headers={"content-type": "application/json"})

    body = {**bench.body(30), "top_k": 5}
    got = [cls("http://vllm.test/v1", "m", timeout_s=5, transport=httpx.MockTransport(answer))
           .complete(body, "verify") for cls in bench.KINDS.values()]
    assert got[0] == got[1] == got[2] == json.loads(bench.RAW["write4x256"])["choices"]
    assert sent[0] == sent[1] == sent[2] and sent[0]["top_k"] == 5 and len(sent[0]["prompt"]) == 30
