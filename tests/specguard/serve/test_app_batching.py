"""The server over a batching engine (`specguard serve --batching`): concurrent chat requests
share forwards and answer exactly as the unbatched engine does (float32 tiny models)."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine  # noqa: E402
from tests.specguard.serve.serve_helpers import live_server  # noqa: E402
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair  # noqa: E402

CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=24, max_step_tokens=8,
                      fallback="speculative", tau=math.inf)
PROMPTS = [f"Question {i}: what is {i} + {2 * i + 3}?" * (1 + i % 3) for i in range(6)]


def _answers(engine: SpecGuardEngine, concurrent: int) -> list[str]:
    app = create_app(engine, ServeSettings(max_concurrent=concurrent, model_name="m"))
    with live_server(app) as url:
        def ask(prompt: str) -> str:
            r = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
                "model": "m", "messages": [{"role": "user", "content": prompt}]})
            assert r.status_code == 200, r.text
            return str(r.json()["choices"][0]["message"]["content"])

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            return list(pool.map(ask, PROMPTS))


def test_concurrent_server_requests_share_forwards(tmp_path: Path) -> None:
    pair = noisy_copy_pair(tmp_path)
    want = _answers(SpecGuardEngine(*pair, config=CFG), 1)
    batched = SpecGuardEngine(*pair, config=CFG, engine_config=EngineConfig(batching=True))
    assert _answers(batched, len(PROMPTS)) == want
    assert batched.batcher is not None
    stats = batched.batcher.stats
    assert stats.batched_forwards > 0 and stats.max_active >= 2 and batched.batcher.active == 0
