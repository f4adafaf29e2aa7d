"""A request's body is decoded and validated off the event loop, through a live server: while
one request's body is being checked, `/health` and the other requests are answered."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import create_app  # noqa: E402
from specguard.serve.http import intake  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import health, live_server, post_chat, reply  # noqa: E402


def test_health_answers_while_a_body_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The body check of one request is held (as a huge body's would take seconds): the event
    loop still answers `/health` and serves another request meanwhile."""
    real, entered, gate = intake.body_problem, threading.Event(), threading.Event()

    def held(body: Any) -> Any:
        if body.get("messages", [{}])[0].get("content") == "hold":
            entered.set()
            gate.wait(20)
        return real(body)

    monkeypatch.setattr(intake, "body_problem", held)
    with live_server(create_app(scripted_engine(reply))) as base, \
            ThreadPoolExecutor(1) as pool:
        slow = pool.submit(post_chat, base, messages=[{"role": "user", "content": "hold"}])
        try:
            assert entered.wait(20)
            t0 = time.monotonic()
            assert health(base)["status"] == "ok"
            assert post_chat(base, timeout=10).status_code == 200
            assert time.monotonic() - t0 < 10
        finally:
            gate.set()
        assert slow.result().status_code == 200
