"""Async iteration of the engine's blocking streams, shared by the adapters' async APIs.

The engine computes on the calling thread (torch), so an event loop must never drive it directly:
`iterate_in_thread` runs the iterator in a worker thread of its own and hands each item to the
loop. One thread per request (rather than the default executor) so that requests queued on the
engine's lock never starve other executor work.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import TypeVar, cast

T = TypeVar("T")
_END = object()


async def iterate_in_thread(open_items: Callable[[], Iterator[T]], cancel: Callable[[], None],
                            name: str = "specguard") -> AsyncGenerator[T, None]:
    """The items of `open_items()`, computed in a worker thread; its errors are raised here.

    `open_items` runs in the worker too (it may load models or wait for the engine). Leaving early
    (break, close, cancellation) calls `cancel`, which must be safe from any thread (as
    `GenerationStream.close` is), and the worker closes the iterator at its next item boundary.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()
    worker = threading.Thread(target=_produce, args=(open_items, loop, queue, stop), daemon=True,
                              name=name)
    worker.start()
    try:
        while (item := await queue.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield cast(T, item)
    finally:
        stop.set()
        cancel()


def _produce(open_items: Callable[[], Iterator[object]], loop: asyncio.AbstractEventLoop,
             queue: asyncio.Queue[object], stop: threading.Event) -> None:
    """Worker thread: pull the items and hand them to the event loop until told to stop."""
    def put(item: object) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            stop.set()

    items: Iterator[object] | None = None
    try:
        items = open_items()
        for item in items:
            put(item)
            if stop.is_set():
                break
    except BaseException as err:  # noqa: BLE001 - re-raised by the awaiting side
        if not stop.is_set():
            put(err)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()  # in this thread, which owns the iterator: releases the engine
        put(_END)
