"""`specguard serve` over a pair whose target is on a vLLM server: when that server goes away, a
request gets 502 (a bad gateway: the upstream failed), plain or streamed, and neither that answer
nor /v1/models shows the target's URL or the credentials in it."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core import SpecGuardConfig, SpecGuardEngine  # noqa: E402
from specguard_core.remote.target import RemoteTarget  # noqa: E402
from tests.specguard.serve.serve_helpers import live_server, sse_events  # noqa: E402
from tests.specguard_core.remote.vllm_helpers import FakeVLLM  # noqa: E402


def test_a_target_server_that_went_away_is_a_502(tiny_pair: Any) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    with live_server(FakeVLLM(t_model, t_tok, name="t").app()) as upstream:
        url = upstream.replace("http://", "http://admin:s3cret-key@") + "/v1"
        target = RemoteTarget.connect(url, "t", t_tok, timeout_s=5)
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=8, tau=math.inf)
    engine = SpecGuardEngine(d_model, d_tok, target, config=cfg, name="sg")
    body = {"model": "sg", "messages": [{"role": "user", "content": "Hi"}]}
    port = upstream.rsplit(":", 1)[1]
    with live_server(create_app(engine)) as base:
        card = httpx.get(f"{base}/v1/models", timeout=5).json()["data"][0]
        assert "s3cret" not in json.dumps(card) and "admin" not in json.dumps(card)
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 502
        assert "target model's server" in r.json()["error"]["message"]
        assert "s3cret" not in r.text and port not in r.text
        with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True},
                          timeout=30) as s:
            events = sse_events(s.iter_lines())
        error = next(e for e in events if isinstance(e, dict) and "error" in e)
        assert error["error"]["code"] == "502" and events[-1] == "[DONE]"
        assert "s3cret" not in json.dumps(error) and port not in json.dumps(error)
