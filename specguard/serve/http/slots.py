"""Admission and slots: how many requests are in (`max_concurrent + max_queue`), how many run,
and the lease that frees a request's place however it ends.

`Slots` is the one seam for concurrency: `max_concurrent` requests iterate the engine at once. An
engine without batching serves one step at a time (a lock), so a wider slot count only queues on
it; a batching engine (`specguard serve`'s default) runs them together.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import Request

from specguard.serve.api.protocol import ErrorType, error_body

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream


class APIError(Exception):
    """An error answered in OpenAI's error JSON with `status`."""

    def __init__(self, status: int, message: str, type_: ErrorType = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.body = status, error_body(message, type_, param, code)
        self.headers = headers


class ClientGone(Exception):
    """The client disconnected; nobody reads the answer."""


class Lease:
    """One admitted request's streams (one per choice, run one after another) and its queue
    place; `release()` is idempotent, so every exit path (done, error, disconnect, a stream
    response never started) may call it."""

    def __init__(self, slots: Slots, streams: list[GenerationStream]) -> None:
        self.slots, self.streams, self._released = slots, streams, False

    @property
    def stream(self) -> GenerationStream:
        return self.streams[0]

    def release(self) -> None:
        if not self._released:
            self._released = True
            for stream in self.streams:
                stream.close()
            self.slots.leave()


class Slots:
    """Admission (`max_concurrent + max_queue` requests in at most) and the running slots."""

    def __init__(self, max_concurrent: int, max_queue: int, poll_s: float) -> None:
        self.max_concurrent, self.max_queue, self.poll_s = max_concurrent, max_queue, poll_s
        self.admitted = 0
        self.running = 0
        self._sem = asyncio.Semaphore(max_concurrent)

    def admit(self) -> None:
        if self.admitted >= self.max_concurrent + self.max_queue:
            raise APIError(503, f"the server is busy: {self.running} requests running and "
                           f"{self.admitted - self.running} queued (--max-queue {self.max_queue}); "
                           "retry later", "server_overloaded", code="queue_full",
                           headers={"Retry-After": "1"})
        self.admitted += 1

    def leave(self) -> None:
        self.admitted -= 1

    @asynccontextmanager
    async def slot(self, request: Request) -> AsyncIterator[None]:
        """Hold a running slot; gives up (ClientGone) if the client leaves while queued."""
        while True:
            try:
                await asyncio.wait_for(self._sem.acquire(), timeout=self.poll_s)
                break
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    raise ClientGone() from None
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._sem.release()
