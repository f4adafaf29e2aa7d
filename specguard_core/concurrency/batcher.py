"""The batching scheduler: concurrent requests share their models' forwards.

Every request still runs its steps top to bottom in its own thread (`run_step` is unchanged); what
changes is how a forward is run. With `EngineConfig(batching=True)` the engine's handles are
`BatchingHandle`s, whose `forward` hands the call to the engine's `Batcher` and blocks until a
*round* has run it:

- **Admission** (`Batcher.admitted`, for a request's whole life): at most `max_active_requests`
  requests hold places at once; the others wait first come, first served, and a waiting request
  honours its cancel flag and deadline. A cancelled request frees its place at once (its cache
  goes when its thread leaves its current forward, so memory can briefly exceed the bound). A
  thread that holds every place and asks for another (streams it opened and left half-read) gets
  an `InputError` instead of waiting for itself.
- **The baton** (`Batcher.step`, around each step): the code between forwards runs for one request
  at a time, as with the lock of the unbatched path, so the loop's caches, attention recorders and
  the tokenizers inside a step are never used from two threads at once (`stream` encodes a prompt
  before admission, in the caller's thread, as without batching). A request gives the baton away
  while it waits for a forward, so the others can reach theirs, and while it waits for a served
  target's HTTP answer (`turns.waiting_io`), so the others' steps and rounds go on.
- **Rounds** (`leader.RoundLeader`, which `Batcher` extends): when every request inside a step
  waits for a forward, or the batch window ran out, a waiting thread leads a round: the model with
  the most waiting calls and any model whose calls waited as long as its last round took, in
  padded forwards of at most `max_batch_rows` rows, on the engine's one runner thread.
- **One OpenMP thread** (`Batcher.step`): the forwards run on the runner, and the requests' own
  code between them with one OpenMP thread (`cpu_runner.one_omp_thread`): on a multi-core CPU,
  OpenMP teams kept by many threads made every forward about 1.3x slower
  (`concurrency/cpu_runner.py`).

Results equal serial runs up to float rounding: each row sees only its own cache (see `padded.py`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState, Forward
from specguard_core.concurrency.cpu_runner import Runner, one_omp_thread
from specguard_core.concurrency.leader import RoundLeader
from specguard_core.concurrency.rounds import Call, Ticket
from specguard_core.concurrency.turns import SLICE_S, Waiter, lending, take
from specguard_core.config import EngineConfig
from specguard_core.text.chat import InputError


def unsupported() -> str | None:
    """Why this installation cannot batch (an error message), or None when it can."""
    import transformers
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "slice_logits_to_keep"):
        return (f"EngineConfig(batching=True) needs a transformers that takes per-row "
                f"logits_to_keep (5.24 does; this is {transformers.__version__}); upgrade "
                "transformers or leave batching off")
    return None


class Batcher(RoundLeader):
    """One per engine: admission and the baton here, the rounds in `RoundLeader` (see the module
    docstring)."""

    def __init__(self, max_batch_rows: int = 16, max_active_requests: int = 16,
                 window_s: float = 0.05, runner: Runner | None = None) -> None:
        super().__init__(max_batch_rows, window_s, runner)
        self.max_active_requests = max_active_requests
        self._baton = threading.Lock()
        self._queue: deque[Ticket] = deque()
        self._active: dict[int, Ticket] = {}  # id(waiter) -> ticket
        self._local = threading.local()

    @classmethod
    def of(cls, config: EngineConfig, runner: Runner | None = None) -> Batcher | None:
        """The engine's batcher (its rounds on `runner`, the engine's), or None when
        `config.batching` is off."""
        if not config.batching:
            return None
        if problem := unsupported():
            raise ValueError(problem)
        return cls(config.max_batch_rows, config.max_active_requests, config.batch_window_s,
                   runner)

    @property
    def active(self) -> int:
        """Requests admitted now (a cancelled one no longer counts)."""
        with self._cond:
            return sum(t.live for t in self._active.values())

    # ---- admission and steps (the request's thread) ----------------------------------------
    @contextmanager
    def admitted(self, waiter: Waiter) -> Iterator[None]:
        """Hold one of the `max_active_requests` places for the request's whole life; wait for
        it in order. Raises what `waiter.check()` raises while waiting."""
        ticket = Ticket(waiter, threading.get_ident())
        with self._cond:
            self._queue.append(ticket)
            try:
                while (self._queue[0] is not ticket or sum(t.live for t in self._active.values())
                       >= self.max_active_requests):
                    held = [t for t in self._active.values() if t.live]
                    if len(held) >= self.max_active_requests and all(
                            t.thread == ticket.thread for t in held):
                        raise InputError(
                            f"this thread holds all of the engine's {self.max_active_requests} "
                            "batching places (streams it has not finished or closed) and "
                            "waits for another: it would wait for itself; read or close() its "
                            "open streams first, or raise EngineConfig.max_active_requests")
                    waiter.check()
                    self._cond.wait(SLICE_S)
                waiter.check()
            except BaseException:
                self._queue.remove(ticket)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._active[id(waiter)] = ticket
            self.stats.max_active = max(self.stats.max_active,
                                        sum(t.live for t in self._active.values()))
            self._cond.notify_all()  # the next in the queue may fit too
        try:
            yield
        finally:
            with self._cond:
                del self._active[id(waiter)]
                self._touch()

    @contextmanager
    def step(self, waiter: Waiter) -> Iterator[None]:
        """Run one step of an admitted request: its forwards go through the rounds, its other
        code holds the baton."""
        with self._cond:
            ticket = self._active[id(waiter)]
            self._in_step.append(ticket)
            self._touch()
        previous = getattr(self._local, "ticket", None)
        try:
            self._take_baton(ticket)
            waiter.check()
            self._local.ticket = ticket
            with lending(lambda: self._lend(ticket)), one_omp_thread():
                yield
        finally:
            self._local.ticket = previous
            if ticket.baton:
                ticket.baton = False
                self._baton.release()
            with self._cond:
                self._in_step.remove(ticket)
                self._touch()  # the others may all be waiting now

    def submit(self, call: Call) -> Forward:
        """Wait for `call` to run in a round (leading the round when it is due); the caller holds
        the baton before and after."""
        ticket = call.ticket
        with self._cond:
            self._pending.append(call)
            self._touch()
        if ticket.baton:
            ticket.baton = False
            self._baton.release()
        self._await(call)
        self._take_baton(ticket)
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    @contextmanager
    def _lend(self, ticket: Ticket) -> Iterator[None]:
        """The baton goes to the others while the step waits on another process; rounds stop
        waiting for it. Nested (already lent), nothing more is lent."""
        if ticket.lent or not ticket.baton:
            yield
            return
        ticket.baton = False
        self._baton.release()
        with self._cond:
            ticket.lent = True
            self._touch()
        try:
            yield
        finally:
            with self._cond:
                ticket.lent = False
                self._touch()
            self._take_baton(ticket)
            ticket.waiter.check()  # cancelled meanwhile: stop here, not after the next forward

    def current(self) -> Ticket | None:
        """The ticket of the step running in this thread (None outside a batched step)."""
        return getattr(self._local, "ticket", None)

    def _take_baton(self, ticket: Ticket) -> None:
        take(self._baton, ticket.waiter)
        ticket.baton = True


class BatchingHandle(ModelHandle):
    """A `ModelHandle` whose forwards, inside a batched step, go through its `Batcher`'s rounds
    (outside one, e.g. a direct call, they run at once as `ModelHandle.forward`)."""

    def __init__(self, model: Any, tokenizer: Any, batcher: Batcher, name: str = "",
                 runner: Runner | None = None) -> None:
        super().__init__(model, tokenizer, name, runner)
        self.batcher = batcher

    def forward(self, state: CacheState, input_ids: torch.Tensor, *, all_logits: bool = False,
                hidden: bool = False, recorder: AttentionRecorder | None = None,
                tentative: bool = False) -> Forward:
        ticket = self.batcher.current()
        if ticket is None:
            return super().forward(state, input_ids, all_logits=all_logits, hidden=hidden,
                                   recorder=recorder, tentative=tentative)
        return self.batcher.submit(Call(self, state, input_ids, all_logits, hidden, recorder,
                                        tentative, ticket))

