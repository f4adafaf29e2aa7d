"""32 callers on one engine at once get exactly what serial calls give: requests are served one at
a time, each with its own state (caches, generator, tool-call bookkeeping), and none leaks into
another. (A stream left suspended while others run is the step loop's to fix.)"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specguard_core.config import SpecGuardConfig
from specguard_core.testing import scripted_engine
from tests.reliability.reliability_helpers import WEATHER, script

N = 32


def _request(i: int) -> dict[str, Any]:
    """Varied requests: sampled and greedy, with and without tools, different configs."""
    kwargs: dict[str, Any] = {"seed": i, "k": 1 + i % 3, "temperature": 0.7 if i % 2 else 0.0}
    if i % 4 == 0:
        return {"messages": "good", "tools": [WEATHER], **kwargs}
    if i % 4 == 1:
        return {"messages": "nan", "tools": [WEATHER], **kwargs}
    return {"messages": f"question number {i}", "tau": 0.5 + (i % 5) / 10, **kwargs}


def _summary(result: Any) -> tuple[Any, ...]:
    return (result.text, result.raw_text, result.finish_reason,
            [(s.text, s.source, s.kind, s.score) for s in result.steps],
            [(c.name, c.arguments) for c in result.tool_calls],
            [c.error for c in result.invalid_tool_calls], result.usage.completion_tokens)


def test_32_concurrent_callers_equal_their_serial_runs() -> None:
    # a low-confidence draft, so steps are both kept and regenerated depending on tau
    engine = scripted_engine(script, draft_sharpness=6.0,
                             config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=64))

    def run(i: int) -> tuple[Any, ...]:
        req = _request(i)
        return _summary(engine.generate(req.pop("messages"), **req))

    serial = [run(i) for i in range(N)]
    assert {s[2] for s in serial} >= {"stop", "tool_calls"}
    assert any(src == "target" for s in serial for _, src, _, _ in s[3])
    assert any(src == "draft" for s in serial for _, src, _, _ in s[3])
    start = threading.Barrier(N)

    def at_once(i: int) -> tuple[Any, ...]:
        start.wait(timeout=60)
        return run(i)

    with ThreadPoolExecutor(max_workers=N) as pool:
        concurrent = list(pool.map(at_once, range(N)))
    assert concurrent == serial
