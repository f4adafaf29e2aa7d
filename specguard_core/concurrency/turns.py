"""Whose turn it is: one engine's requests run their steps one at a time, and a step that waits on
another process lends its turn meanwhile.

- `Turns` (the engine without batching): a lock held for one step of one request, taken in short
  slices so a cancelled request or one past its deadline stops waiting.
- `batcher.Batcher.step` does the same with batching (the baton, held between forwards).
- `waiting_io()`: around a wait on another process (a served target's HTTP answer) the step
  running in this thread lends its turn, so the other requests' steps run meanwhile and their
  calls reach the server together (vLLM batches them); the waiting request touches no shared
  state until it has its turn back. Outside a step it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from specguard_core.concurrency.cpu_runner import one_omp_thread

SLICE_S = 0.05  # how often a waiting request looks at its cancel flag and deadline

Lend = Callable[[], AbstractContextManager[None]]
_current = threading.local()  # .lend: how the step running in this thread lends its turn


class Waiter(Protocol):
    """A request as the turns see it (`request.Request` is one): `check()` raises when it is
    cancelled or past its deadline."""

    cancel: threading.Event

    def check(self) -> None: ...


@contextmanager
def waiting_io() -> Iterator[None]:
    """Lend the running step's turn for the block (see the module docstring); it is taken back
    before the block's end returns, raising what the request's `check()` raises if it was
    cancelled meanwhile. Nested, the inner block lends nothing more."""
    lend: Lend | None = getattr(_current, "lend", None)
    if lend is None:
        yield
        return
    with lend():
        yield


@contextmanager
def lending(lend: Lend) -> Iterator[None]:
    """Make `lend` how this thread's step lends its turn, for the block."""
    previous = getattr(_current, "lend", None)
    _current.lend = lend
    try:
        yield
    finally:
        _current.lend = previous


def take(lock: threading.Lock, waiter: Waiter) -> None:
    """Acquire `lock`, looking at `waiter.check()` every `SLICE_S` meanwhile."""
    while not lock.acquire(timeout=SLICE_S):
        waiter.check()


class Turns:
    """One step of one request at a time (the engine without batching)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextmanager
    def step(self, waiter: Waiter) -> Iterator[None]:
        """Hold the turn for one step of `waiter` (waiting for it in slices), lendable through
        `waiting_io`."""
        take(self._lock, waiter)
        held = True

        @contextmanager
        def lend() -> Iterator[None]:
            nonlocal held
            if not held:  # a nested wait: already lent
                yield
                return
            self._lock.release()
            held = False
            try:
                yield
            finally:
                take(self._lock, waiter)
                held = True
                waiter.check()  # cancelled meanwhile: stop here, not after the next forward

        try:
            waiter.check()
            with lending(lend), one_omp_thread():  # the forwards run on the engine's runner
                yield
        finally:
            if held:
                self._lock.release()
