"""The server's responses: JSON bodies that always encode, and SSE streams whose engine work is
never paced by the reader.

`Relay` runs a request's generation as a task of its own and buffers its events, so a client that
reads slowly (or stops reading) does not hold its slot while its TCP connection lives: the slot is
held while the engine works, the rest waits in memory (bounded by the request's token budget)
until the client reads it or leaves. However the response ends (done, disconnect, an error while
sending), `EventStream` stops the task and releases the request's place.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse

from specguard.serve.slots import Lease
from specguard.serve.untrusted import encodable

Put = Callable[[str], None]


class JSONBody(JSONResponse):
    """A JSON response that encodes whatever the model wrote: a lone surrogate (a tool call's
    `\\ud800`, say) becomes U+FFFD instead of a failed response."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":"))
        return encodable(text).encode("utf-8")


class Relay:
    """Runs `produce(put)` as a task of its own once iterated, and yields what it puts (SSE
    events) at the reader's pace; `None` put by the task's end closes the stream."""

    def __init__(self, produce: Callable[[Put], Awaitable[None]]) -> None:
        self._produce = produce
        self._task: asyncio.Task[None] | None = None

    async def events(self) -> AsyncIterator[str]:
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def run() -> None:
            try:
                await self._produce(queue.put_nowait)
            finally:
                queue.put_nowait(None)

        self._task = asyncio.create_task(run(), name="specguard-serve-stream")
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the task if it still runs (its own cleanup closes the engine's streams and frees
        the slot); safe to call any number of times."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()


class EventStream(StreamingResponse):
    """SSE response over a `Relay` that stops its task and releases its lease however the
    response ends (even if the body iterator never started because the client left at once)."""

    def __init__(self, relay: Relay, lease: Lease) -> None:
        super().__init__(relay.events(), media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.relay, self.lease = relay, lease

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.relay.cancel()
            self.lease.release()
