"""Batching on the default real pair, float32 (opt-in: SPECGUARD_REAL_MODELS=1 with the pair cached;
`specguard models fetch`): concurrent requests that share forwards (greedy one-candidate steps, and
sampled k > 1 proposals) give exactly their serial texts on real Qwen2 weights."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from specguard_core import EngineConfig, SpecGuardEngine
from specguard_core.config import preset
from tests.specguard_core.engine.test_fallback_real import _real_paths

pytestmark = pytest.mark.real
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("Natalia sold 48 clips in April and half as many in May. How many in total? Reason step by "
     "step.", {}),
    ("What is 17 * 23? Reason step by step.", {}),
    ("A train travels 60 km in 45 minutes. What is its speed in km/h? Reason step by step.",
     dict(k=3, temperature=0.7, top_p=0.8, seed=7, tau_accept=0.6, tau_reject=0.6)),
]


def test_concurrent_requests_equal_their_serial_runs_on_the_real_pair() -> None:
    draft, target = _real_paths()
    cfg = preset("balanced", max_new_tokens=48)
    serial = SpecGuardEngine.from_pretrained(draft, target, device="cpu", dtype="float32",
                                             progress=False, config=cfg)
    batched = SpecGuardEngine(serial.draft.model, serial.draft.tokenizer,  # the same weights
                              serial.target.model, serial.target.tokenizer,  # type: ignore[attr-defined]
                              config=cfg, engine_config=EngineConfig(batching=True))
    want = [serial.generate(q, **kw).raw_text for q, kw in REQUESTS]
    with ThreadPoolExecutor(len(REQUESTS)) as pool:
        got = list(pool.map(lambda r: batched.generate(r[0], **r[1]).raw_text, REQUESTS))
    assert got == want
    assert batched.batcher is not None
    stats = batched.batcher.stats
    assert stats.batched_forwards > 0 and stats.max_rows >= 4  # a k=3 proposal beside a row
