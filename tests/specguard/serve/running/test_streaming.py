"""Slots and time in streamed responses, through a live server: a client that stops reading does
not hold its slot once the engine is done (the rest waits in a buffer), and gets every event when
it reads again; a stream that ends early frees its slot; a slow step sends keep-alive comments;
the unread events of all streams are bounded, the stream furthest behind ended past the bound."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard.serve.running.streaming import Buffers, Put, Relay  # noqa: E402
from specguard_core.config import SpecGuardConfig  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    health,
    live_server,
    long_reply,
    post_chat,
    reply,
    sse_events,
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


def test_a_slow_step_keeps_the_stream_alive_with_comments() -> None:
    # each token call waits, so a step takes far longer than the keep-alive interval
    engine = scripted_engine(long_reply(steps=2, delay_s=0.08))
    body = {"model": "specguard-scripted", "stream": True,
            "messages": [{"role": "user", "content": "count"}]}
    for keepalive, expect in ((0.04, True), (0.0, False)):
        app = create_app(engine, ServeSettings(sse_keepalive_s=keepalive))
        with live_server(app) as url, httpx.stream("POST", f"{url}/v1/chat/completions",
                                                   json=body, timeout=60) as r:
            comments: list[str] = []
            events = sse_events(r.iter_lines(), comments)
        assert events[-1] == "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert text == "Step 0.\n\nStep 1."
        assert (len(comments) >= 2) == expect and set(comments) <= {": keep-alive"}
    openai = pytest.importorskip("openai")  # a real client skips the comments
    with live_server(create_app(engine, ServeSettings(sse_keepalive_s=0.04))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        parts = client.chat.completions.create(model="specguard-scripted", stream=True,
                                               messages=[{"role": "user", "content": "count"}])
        assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == \
            "Step 0.\n\nStep 1."


def test_unread_events_are_bounded_across_streams() -> None:
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=4000, max_steps=1000)
    engine = scripted_engine(long_reply(steps=STEPS, delay_s=0.0), config=cfg)
    app = create_app(engine, ServeSettings(max_concurrent=2, max_stream_buffer_bytes=30_000))
    with live_server(app, send_buffer=4096) as url:
        port = int(url.rsplit(":", 1)[1])
        client = stalled_reader(port, {"model": "specguard-scripted", "stream": True,
                                       "max_tokens": 4000,
                                       "messages": [{"role": "user", "content": "count"}]})
        try:
            assert wait_for(lambda: health(url)["running"] == 0 and health(url)["queued"] == 0,
                            timeout_s=60)
            # the buffer it held is free again: another stream is read whole
            with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=30, json={
                    "model": "specguard-scripted", "stream": True, "max_tokens": 20,
                    "messages": [{"role": "user", "content": "count"}]}) as r:
                others = sse_events(r.iter_lines())
            rest = read_rest(client)
        finally:
            client.close()
    assert others[-1] == "[DONE]" and not any("error" in e for e in others[:-1])
    assert others[-2]["choices"][0]["finish_reason"] == "length"
    # the slow reader's stream was ended: an error event, then [DONE], most steps dropped
    assert rest.count(b'"step": {') < STEPS
    at = rest.index(b'data: {"error"')  # the body is chunked: read the one event's line
    error = json.loads(rest[at + len(b"data: "):rest.index(b"\n", at)])["error"]
    assert error["code"] == "stream_buffer_full" and error["type"] == "server_overloaded"
    assert "--max-stream-buffer-bytes" in error["message"]
    assert rest.rfind(b"data: ") == rest.index(b"data: [DONE]\n\n", at)  # the last event


def test_the_stream_furthest_behind_is_the_one_ended() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        buffers = Buffers(1000)
        slow, quick = (Relay(buffers, "data: over\n\n", "data: bye\n\n") for _ in range(2))

        async def produce_slow(put: Put) -> None:
            for _ in range(5):
                put("x" * 199 + "\n")
            await asyncio.Event().wait()  # still generating: ended by the overflow

        async def produce_quick(put: Put) -> None:
            for _ in range(3):
                put("y" * 199 + "\n")

        slow.produce, quick.produce = produce_slow, produce_quick
        slow_events, quick_events = slow.events(), quick.events()
        seen_slow = [await anext(slow_events)]  # 200 read, 800 unread
        seen_quick = [item async for item in quick_events]  # passes 1000: slow is ended
        seen_slow += [item async for item in slow_events]
        return seen_slow, seen_quick, buffers.total

    seen_slow, seen_quick, left = asyncio.run(scenario())
    assert seen_quick == [b"y" * 199 + b"\n"] * 3
    assert seen_slow == [b"x" * 199 + b"\n", b"data: over\n\n", b"data: [DONE]\n\n"]
    assert left == 0


def test_a_stream_cut_by_shutdown_says_so() -> None:
    from sse_starlette.sse import AppStatus

    engine = scripted_engine(long_reply(steps=40, delay_s=0.02))
    body = {"model": "specguard-scripted", "stream": True, "max_tokens": 4000,
            "messages": [{"role": "user", "content": "count"}]}
    events: list[object] = []
    try:
        with live_server(create_app(engine)) as url, httpx.stream(
                "POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            for line in lines:  # the role chunk and a first step
                events.append(line)
                if '"step": {' in line:
                    assert next(lines) == ""  # the event's end
                    break
            AppStatus.should_exit = True  # what uvicorn's signal handler sets
            events += sse_events(lines)
    finally:
        AppStatus.should_exit = False
    error = events[-2]
    assert isinstance(error, dict) and error["error"]["code"] == "server_shutdown"
    assert "incomplete" in error["error"]["message"] and events[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and e.get("choices", [{}])[0].get("finish_reason")
                   for e in events[:-2])  # no finish_reason: the answer was cut
