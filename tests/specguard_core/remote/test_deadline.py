"""`target_timeout` bounds a served target's whole call, wall clock: a server on 127.0.0.1 that
trickles its answer (headers or body) a byte at a time is cut off at the deadline."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specguard_core.remote.http import RemoteTargetError, ServerClient

ANSWER = json.dumps({"choices": [{"index": 0, "text": "ok"}]}).encode()


def _answer(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@contextmanager
def server(trickle_from: int | None, gap_s: float = 0.05) -> Iterator[str]:
    """A one-thread HTTP server answering every request with `ANSWER`: whole, or from byte
    `trickle_from` on one byte every `gap_s` (0: the headers trickle too). It stops after 200
    trickled bytes, when the client hangs up, or when the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()
    padded = ANSWER + b" " * 400  # room to trickle for longer than any deadline below

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2.0)
                while not stop.is_set():
                    try:
                        if not conn.recv(65536):
                            break
                        if trickle_from is None:
                            conn.sendall(_answer(ANSWER))
                            continue
                        data = _answer(padded)
                        conn.sendall(data[:trickle_from])
                        for i in range(trickle_from, min(len(data), trickle_from + 200)):
                            if stop.is_set():
                                break
                            conn.sendall(data[i: i + 1])
                            time.sleep(gap_s)
                        break
                    except OSError:  # the client hung up
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_prompt_server_answers_every_call_through_the_deadline_transport() -> None:
    with server(trickle_from=None) as url:
        client = ServerClient(url, "tiny", timeout_s=2)
        for _ in range(3):  # keep-alive: each call gets its own deadline
            assert client.complete({"prompt": [1]}, "write a step") == [{"index": 0, "text": "ok"}]
        client.close()


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_trickling_server_is_cut_off_at_target_timeout(part: str) -> None:
    start_at = len(_answer(ANSWER)) - len(ANSWER) if part == "body" else 0
    with server(trickle_from=start_at, gap_s=0.05) as url:  # ~30 s to send it all
        client = ServerClient(url, "tiny", timeout_s=0.6)
        began = time.monotonic()
        with pytest.raises(RemoteTargetError, match=r"did not answer in full within 0\.6s "
                           r"\(asked to write a step\).*target_timeout"):
            client.complete({"prompt": [1]}, "write a step")
        assert time.monotonic() - began < 0.6 + 0.5  # wall clock, not per read
        client.close()


def test_a_call_ends_by_the_requests_deadline_when_that_comes_first() -> None:
    from specguard_core.remote.deadline import capped

    with server(trickle_from=0, gap_s=0.05) as url:
        client = ServerClient(url, "tiny", timeout_s=30)
        began = time.monotonic()
        with capped(began + 0.5), pytest.raises(TimeoutError, match="request's timeout ran out"):
            client.complete({"prompt": [1]}, "write a step")
        assert time.monotonic() - began < 0.5 + 0.5
        with capped(None):  # no cap: the call's own deadline only
            pass
        client.close()


def test_an_environment_proxy_is_used_unless_no_proxy_skips_the_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard_core.remote.deadline import _env_proxy

    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert _env_proxy("http://vllm.lan:8000/v1") is None
    monkeypatch.setenv("http_proxy", "http://user:pw@proxy.lan:3128")
    found = _env_proxy("http://vllm.lan:8000/v1")
    assert found is not None and (found.host, found.port, found.username) == ("proxy.lan", 3128,
                                                                              "user")
    monkeypatch.setenv("no_proxy", "vllm.lan")
    assert _env_proxy("http://vllm.lan:8000/v1") is None
