"""The server's responses: JSON bodies that always encode, and SSE streams whose engine work is
never paced by the reader.

`Relay` runs a request's generation as a task of its own and buffers its events, so a client that
reads slowly (or stops reading) does not hold its slot while its TCP connection lives: the slot is
held while the engine works, the rest waits in memory until the client reads it or leaves. The
unread events of all streams together are bounded (`Buffers`, `--max-stream-buffer-bytes`): past
the bound, the stream whose reader is furthest behind (the most unread bytes) is ended with an
error event and `[DONE]`, its unread events dropped. `EventStream` is sse-starlette's response:
an SSE comment every `keepalive_s` so proxies keep a stream whose step takes long, the client's
disconnect watched, and at server shutdown a stream is ended with an error event so a client
can tell a cut answer from a whole one; however the response ends (done, disconnect, shutdown, an
error while sending), it stops the task and releases the request's place.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from specguard.serve.api.untrusted import encodable
from specguard.serve.http.slots import Lease

Put = Callable[[str], None]
SHUTDOWN_GRACE_S = 1.0  # at shutdown, how long a stream has to send its last events


class JSONBody(JSONResponse):
    """A JSON response that encodes whatever the model wrote: a lone surrogate (a tool call's
    `\\ud800`, say) becomes U+FFFD instead of a failed response."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":"))
        return encodable(text).encode("utf-8")


class Buffers:
    """The bound on unread stream events across all streams (`max_bytes`): when a put would pass
    it, the stream with the most unread bytes (its reader is the furthest behind) is ended."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.total = max_bytes, 0
        self.relays: set[Relay] = set()

    def add(self, relay: Relay, size: int) -> None:
        self.relays.add(relay)
        self.total += size
        while self.total > self.max_bytes and self.relays:
            max(self.relays, key=lambda r: r.unread).overflow()

    def remove(self, size: int) -> None:
        self.total -= size


class Relay:
    """Runs `produce(put)` (set before the response starts) as a task of its own once iterated,
    and yields what it puts (SSE events) at the reader's pace; `None` put by the task's end closes
    the stream. Unread events count against `buffers`; a relay ended by them drops its unread
    events, stops its task and sends `overflow_event`, then `[DONE]`. When the server shuts
    down (`shutdown`, set by the response) it stops its task and sends `shutdown_event` and
    `[DONE]` after the events not read yet, so a client can tell a cut answer from a whole one."""

    def __init__(self, buffers: Buffers, overflow_event: str, shutdown_event: str) -> None:
        self.buffers, self.overflow_event = buffers, overflow_event
        self.shutdown_event, self.shutdown = shutdown_event, anyio.Event()
        self.produce: Callable[[Put], Awaitable[None]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.unread, self.ended = 0, False

    def put(self, event: str | None) -> None:
        if self.ended:
            return
        item = None if event is None else event.encode("utf-8")
        self._queue.put_nowait(item)
        if item is not None:
            self.unread += len(item)
            self.buffers.add(self, len(item))

    def overflow(self) -> None:
        """End this stream: drop its unread events, stop its task, tell the reader why."""
        while not self._queue.empty():
            self._queue.get_nowait()
        self._forget()
        self.cancel()
        self._close_with(self.overflow_event)

    def _close_with(self, event: str) -> None:
        for item in (event.encode("utf-8"), b"data: [DONE]\n\n", None):
            self._queue.put_nowait(item)
        self.ended = True

    async def _on_shutdown(self) -> None:
        await self.shutdown.wait()
        if not self.ended:
            self.cancel()
            self._close_with(self.shutdown_event)

    def _forget(self) -> None:
        self.buffers.remove(self.unread)
        self.buffers.relays.discard(self)
        self.unread = 0

    async def _next(self) -> bytes | None:
        item = await self._queue.get()
        if item is not None and not self.ended:
            self.unread -= len(item)
            self.buffers.remove(len(item))
        return item

    async def events(self) -> AsyncIterator[bytes]:
        produce = self.produce
        assert produce is not None, "Relay.produce is set before the response starts"

        async def run() -> None:
            try:
                await produce(self.put)
            finally:
                self.put(None)

        self._task = asyncio.create_task(run(), name="specguard-serve-stream")
        self._watch = asyncio.create_task(self._on_shutdown(), name="specguard-serve-shutdown")
        try:
            while (item := await self._next()) is not None:
                yield item
        finally:
            self.cancel()
            self._forget()

    def cancel(self) -> None:
        """Stop the task if it still runs (its own cleanup closes the engine's streams and frees
        the slot); safe to call any number of times."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._watch is not None and not self._watch.done() \
                and self._watch is not asyncio.current_task():
            self._watch.cancel()


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")  # clients skip comments


class EventStream(EventSourceResponse):
    """SSE response over a `Relay` (its events are framed already), with a keep-alive comment
    every `keepalive_s` (0: none), that stops the relay's task and releases its lease however the
    response ends (even if the body iterator never started because the client left at once)."""

    def __init__(self, relay: Relay, lease: Lease, keepalive_s: float) -> None:
        super().__init__(relay.events(), ping=keepalive_s, sep="\n",
                         ping_message_factory=_keepalive, headers={"Cache-Control": "no-cache"},
                         shutdown_event=relay.shutdown, shutdown_grace_period=SHUTDOWN_GRACE_S)
        del self.headers["connection"]  # the server's to decide (a client may ask to close)
        self.relay, self.lease = relay, lease

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.relay.cancel()
            self.lease.release()
