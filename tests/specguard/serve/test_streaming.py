"""Slots and time in streamed responses, through a live server: a client that stops reading does
not hold its slot once the engine is done (the rest waits in a buffer), and gets every event when
it reads again; a stream that ends early frees its slot."""

from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.config import SpecGuardConfig  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    health,
    live_server,
    long_reply,
    post_chat,
    reply,
    wait_for,
)

STEPS = 200  # about 170 kB of events: far more than the small socket buffers below hold


def stalled_reader(port: int, body: dict[str, object]) -> socket.socket:
    """A client with a tiny receive buffer that sends a streamed request, reads the first bytes
    of the answer and then stops reading."""
    data = json.dumps(body).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"Connection: close\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(data)
                   + data)
    assert client.recv(12).startswith(b"HTTP/1.1 200")
    return client


def read_rest(client: socket.socket) -> bytes:
    """The rest of the response, to the end of the connection (`Connection: close`)."""
    client.settimeout(30)
    out = b""
    while chunk := client.recv(1 << 16):
        out += chunk
    return out


def test_a_reader_that_stops_reading_does_not_hold_its_slot() -> None:
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=4000, max_steps=1000)
    # one slot: while the stalled reader held it, the second request could not run
    engine = scripted_engine(long_reply(steps=STEPS, delay_s=0.0), config=cfg)
    app = create_app(engine, ServeSettings(max_concurrent=1, max_queue=2))
    with live_server(app, send_buffer=4096) as url:
        port = int(url.rsplit(":", 1)[1])
        client = stalled_reader(port, {"model": "specguard-scripted", "stream": True,
                                       "max_tokens": 4000,
                                       "messages": [{"role": "user", "content": "count"}]})
        try:
            assert wait_for(lambda: health(url)["running"] == 0 and health(url)["queued"] == 0,
                            timeout_s=60), "the slot stayed held by a reader that stopped"
            engine_free = post_chat(url, max_tokens=5)
            assert engine_free.status_code == 200, engine_free.text
            rest = read_rest(client)  # nothing was lost: the buffer holds the rest
        finally:
            client.close()
    assert rest.count(b'"step": {') >= STEPS - 1  # every step's event
    assert b'"finish_reason": "stop"' in rest and b"data: [DONE]" in rest


def test_a_stream_the_client_leaves_at_once_frees_its_slot() -> None:
    engine = scripted_engine(reply)
    with live_server(create_app(engine)) as url:
        port = int(url.rsplit(":", 1)[1])
        for _ in range(3):
            client = stalled_reader(port, {"model": "specguard-scripted", "stream": True,
                                           "messages": [{"role": "user", "content": "hi"}]})
            client.close()
        assert wait_for(lambda: health(url)["running"] == 0 and health(url)["queued"] == 0)
        assert post_chat(url).json()["choices"][0]["message"]["content"] == ANSWER
