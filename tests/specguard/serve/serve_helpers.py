"""Helpers for the server tests: scripted replies, a live uvicorn server on loopback, SSE parsing."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

ANSWER = "First, add 3 and 4 to get 7.\n\nThen multiply by 6.\n\nThe answer is 42."
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
MULTIPLY_CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>'
JSON_REPLY = '{"city": "Paris", "days": 2}'
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}


def raw(question: str) -> str:
    """A raw completion prompt that is a chat turn written out (the scripted models answer
    after an assistant header)."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def after_tool(result: str) -> str:
    return f"The tool says {result}.\n\nDone."


def reply(prompt: str) -> str:
    """The scripted assistant: a tool result is reported, offered tools get a call (multiply when
    offered, else get_weather), a JSON instruction gets JSON, "Repeat: X" gets X back, anything
    else the three-step answer."""
    if "<tool_response>" in prompt:
        return after_tool(prompt.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0])
    if "<tools>" in prompt:
        return MULTIPLY_CALL if '"multiply"' in prompt else CALL
    if "single JSON object" in prompt:
        return JSON_REPLY
    if repeat := re.search(r"Repeat: (\w+)", prompt):
        return f"You said {repeat.group(1)}.\n\nThat is all."
    return ANSWER


def long_reply(steps: int, delay_s: float) -> Any:
    """A reply of `steps` steps that takes `delay_s` per token call, so a test can act mid-run."""
    text = "\n\n".join(f"Step {i}." for i in range(steps))

    def responder(prompt: str) -> str:
        time.sleep(delay_s)
        return text
    return responder


def gated_reply(gate: threading.Event, timeout_s: float = 20.0) -> Any:
    """The plain answer, but every token waits for `gate` (bounded), to hold a request in the
    engine while a test looks at the queue."""
    def responder(prompt: str) -> str:
        gate.wait(timeout_s)
        return ANSWER
    return responder


@contextmanager
def live_server(app: Any, send_buffer: int | None = None) -> Iterator[str]:
    """Run `app` under uvicorn on 127.0.0.1 (a free port) in a thread; yields the base URL.
    Stops by itself when the block ends. `send_buffer`: the connections' kernel send buffer
    (bytes), small to make a reader that stops reading block the server's writes soon."""
    import uvicorn

    sock = socket.create_server(("127.0.0.1", 0))
    if send_buffer is not None:  # accepted connections inherit it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def sse_events(lines: Iterator[str], comments: list[str] | None = None) -> list[Any]:
    """The `data:` payloads of a server-sent event stream, JSON-decoded ("[DONE]" kept as is);
    checks the framing: every event is one `data: ` line followed by a blank line, or a comment
    (`: ...`, collected in `comments` when given) and its blank line."""
    events: list[Any] = []
    pending = None
    in_comment = False
    for line in lines:
        if line.startswith(":"):
            assert pending is None, "a comment inside an event"
            in_comment = True
            if comments is not None:
                comments.append(line)
            continue
        if line == "" and in_comment:
            in_comment = False
            continue
        if line == "":
            assert pending is not None, "blank line without an event"
            events.append(pending)
            pending = None
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        assert pending is None, "two data lines in one event"
        body = line[len("data: "):]
        pending = body if body == "[DONE]" else json.loads(body)
    assert pending is None, "the stream ended mid-event"
    return events


def wait_for(condition: Any, timeout_s: float = 10.0) -> bool:
    """Poll `condition()` until true or the timeout (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def health(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/health", timeout=5).json()


def post_chat(base: str, timeout: float = 30, **body: Any) -> httpx.Response:
    """POST /v1/chat/completions to the scripted engine's server (a default question)."""
    body.setdefault("model", "specguard-scripted")
    body.setdefault("messages", [{"role": "user", "content": "What is (3 + 4) * 6?"}])
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=timeout)


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI error object of `r`, checked to be `status` with OpenAI's four fields."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err
