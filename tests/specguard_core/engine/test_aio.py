"""`iterate_in_thread`: items, errors, early exit, and that the work happens off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from specguard_core.engine.aio import iterate_in_thread


class Source:
    """An iterator that records which threads opened, advanced and closed it."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.threads: dict[str, str] = {}
        self.closed = threading.Event()
        self.cancelled = threading.Event()

    def open(self) -> Iterator[int]:
        self.threads["open"] = threading.current_thread().name
        return self.items()

    def items(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.threads["next"] = threading.current_thread().name
                if i == self.fail_at:
                    raise ValueError(f"boom at {i}")
                yield i
        finally:
            self.threads["close"] = threading.current_thread().name
            self.closed.set()


async def collect(source: Source) -> list[int]:
    return [i async for i in iterate_in_thread(source.open, source.cancelled.set, name="w")]


def test_items_in_order_computed_in_the_worker_thread() -> None:
    source = Source(5)
    assert asyncio.run(collect(source)) == [0, 1, 2, 3, 4]
    assert source.threads == {"open": "w", "next": "w", "close": "w"}
    assert source.closed.is_set()


def test_an_error_in_the_worker_is_raised_to_the_awaiting_side() -> None:
    source = Source(5, fail_at=2)
    with pytest.raises(ValueError, match="boom at 2"):
        asyncio.run(collect(source))
    assert source.closed.wait(5)


def test_leaving_early_cancels_and_closes_the_iterator_in_its_thread() -> None:
    source = Source(1000)

    async def first_two() -> list[int]:
        out = []
        agen = iterate_in_thread(source.open, source.cancelled.set, name="w")
        async for i in agen:
            out.append(i)
            if len(out) == 2:
                break
        await agen.aclose()
        return out

    assert asyncio.run(first_two()) == [0, 1]
    assert source.cancelled.is_set()
    assert source.closed.wait(5)
    assert source.threads["close"] == "w"


def test_the_event_loop_keeps_running_while_the_worker_blocks() -> None:
    gate = threading.Event()

    def blocking() -> Iterator[str]:
        if not gate.wait(5):  # only the event loop opens the gate: it must not be blocked
            raise TimeoutError("the event loop was blocked")
        yield "done"

    async def main() -> list[str]:
        async def open_gate() -> None:
            await asyncio.sleep(0.01)
            gate.set()

        opener = asyncio.create_task(open_gate())
        out = [x async for x in iterate_in_thread(blocking, lambda: None)]
        await opener
        return out

    assert asyncio.run(main()) == ["done"]
