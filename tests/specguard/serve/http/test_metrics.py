"""GET /metrics through a live server: Prometheus's text format behind the API key, requests by
outcome, running and waiting requests, tokens, latency and steps by path, all matching what the
responses themselves report."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
parser = pytest.importorskip("prometheus_client.parser")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    error_of,
    gated_reply,
    live_server,
    reply,
    sse_events,
    wait_for,
)

AUTH = {"Authorization": "Bearer k"}
MODEL = "specguard-scripted"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of GET /metrics by (name, sorted labels)."""
    r = httpx.get(f"{url}/metrics", headers=AUTH, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(r.text) for s in family.samples}


def chat(url: str, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What is (3 + 4) * 6?"}],
            **body}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=AUTH, timeout=30)


def requests(samples: dict[Any, float], outcome: str, endpoint: str = "chat") -> float:
    return samples[("specguard_requests_total", (("endpoint", endpoint), ("outcome", outcome)))]


def test_metrics_count_what_the_responses_report() -> None:
    engine = scripted_engine(reply)
    with live_server(create_app(engine, ServeSettings(api_key="k"))) as url:
        assert error_of(httpx.get(f"{url}/metrics", timeout=10), 401)["code"] == "invalid_api_key"
        before = scrape(url)
        assert requests(before, "finished") == 0
        assert before[("specguard_requests_running", ())] == 0
        plain = chat(url, specguard={"route": "check"}).json()  # the target checks each step
        with httpx.stream("POST", f"{url}/v1/chat/completions", headers=AUTH, timeout=30, json={
                "model": MODEL, "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "Repeat: hello"}]}) as r:
            events = sse_events(r.iter_lines())
        error_of(chat(url, temperature=5), 400)
        error_of(chat(url, model="gpt-4o"), 404)
        comp = httpx.post(f"{url}/v1/completions", headers=AUTH, timeout=30,
                          json={"model": MODEL, "prompt": "What is (3 + 4) * 6?"}).json()
        after = scrape(url)
    streamed_steps = [e["specguard"]["step"] for e in events[:-1] if "step" in e.get("specguard", {})]
    usages = [plain["usage"], events[-2]["usage"], comp["usage"]]
    assert (requests(after, "finished"), requests(after, "invalid")) == (2, 2)
    assert requests(after, "finished", "completions") == 1
    assert requests(after, "failed") == requests(after, "aborted") == 0
    assert after[("specguard_prompt_tokens_total", ())] == sum(u["prompt_tokens"] for u in usages)
    assert after[("specguard_generation_tokens_total", ())] == sum(
        u["completion_tokens"] for u in usages)
    assert after[("specguard_request_latency_seconds_count", ())] == 3
    assert after[("specguard_request_latency_seconds_sum", ())] > 0
    paths = Counter(s["path"] for s in [*plain["specguard"]["steps"], *streamed_steps,
                                        *comp["specguard"]["steps"]])
    assert paths["target-checked"] and paths["kept"], paths
    for path in ("kept", "target-checked", "target-verified", "regenerated"):
        assert after[("specguard_steps_total", (("path", path),))] == paths.get(path, 0)


def test_running_waiting_and_rejected() -> None:
    gate = threading.Event()
    engine = scripted_engine(gated_reply(gate))
    settings = ServeSettings(api_key="k", max_concurrent=1, max_queue=1)
    with live_server(create_app(engine, settings)) as url, ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(chat, url)
            assert wait_for(lambda: scrape(url)[("specguard_requests_running", ())] == 1)
            second = pool.submit(chat, url)
            assert wait_for(lambda: scrape(url)[("specguard_requests_waiting", ())] == 1)
            assert error_of(chat(url), 503)["code"] == "queue_full"
        finally:
            gate.set()
        assert first.result().status_code == second.result().status_code == 200
        samples = scrape(url)
    assert (requests(samples, "finished"), requests(samples, "rejected")) == (2, 1)
    assert samples[("specguard_requests_running", ())] == 0
    assert samples[("specguard_requests_waiting", ())] == 0
