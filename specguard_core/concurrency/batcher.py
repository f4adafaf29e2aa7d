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
  while it waits for a forward, so the others can reach theirs.
- **Rounds**: when every request inside a step waits for a forward (cancelled ones never count),
  or when nothing happened for `batch_window_s` with forwards waiting, the thread that sees it
  first runs a round. A round serves the model with the most waiting calls, plus any model whose
  oldest call has waited as long as that model's last round took (ski rental: a call passed over
  never waits more than its own forward costs, so no request starves, while calls for the target
  gather as the others draft instead of a target forward in every round). Its calls
  go through `batch.forward_rows` in forwards of at most `max_batch_rows` rows (a forked
  proposal's call brings its k rows; grouped by length, so a long prefill never pads many short
  rows); what cannot be batched (a sliding-window cache, a call with more rows than the bound)
  runs alone.
  A request waiting for a served target's HTTP answer (`turns.waiting_io`) lends the baton and
  does not count as running meanwhile, so the others' steps and rounds go on.
- **The runner**: whichever request leads a round, its forwards run on the engine's one runner
  thread (`cpu_runner.Runner`; the leader waits for them), and the requests' own code between
  forwards runs with one OpenMP thread (`threads.one_omp_thread`): on a multi-core CPU, OpenMP
  teams kept by many threads made every forward about 1.3x slower (`concurrency/cpu_runner.py`).

Results equal serial runs up to float rounding: each row sees only its own cache (see `padded.py`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState, Forward
from specguard_core.concurrency.cpu_runner import Runner, one_omp_thread
from specguard_core.concurrency.rounds import (
    PAD_FREE_TOKENS,
    Call,
    SchedulerStats,
    chunks,
    run_alone,
    run_together,
)
from specguard_core.concurrency.turns import SLICE_S, Waiter, lending, take
from specguard_core.config import EngineConfig
from specguard_core.text.chat import InputError


@dataclass(eq=False)
class _Ticket:
    """A request's place in the scheduler; `baton` while its step code runs, `lent` while it
    waits on another process (`turns.waiting_io`)."""

    waiter: Waiter
    thread: int = 0  # the thread that asked for the place
    baton: bool = False
    lent: bool = False

    @property
    def live(self) -> bool:
        return not self.waiter.cancel.is_set()


def unsupported() -> str | None:
    """Why this installation cannot batch (an error message), or None when it can."""
    import transformers
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "slice_logits_to_keep"):
        return (f"EngineConfig(batching=True) needs a transformers that takes per-row "
                f"logits_to_keep (5.24 does; this is {transformers.__version__}); upgrade "
                "transformers or leave batching off")
    return None


class Batcher:
    """One per engine: admission, the baton, and the rounds (see the module docstring)."""

    def __init__(self, max_batch_rows: int = 16, max_active_requests: int = 16,
                 window_s: float = 0.05, runner: Runner | None = None) -> None:
        self.max_batch_rows, self.max_active_requests = max_batch_rows, max_active_requests
        self.window_s = window_s
        self.stats = SchedulerStats()
        self._cond = threading.Condition()
        self._baton = threading.Lock()
        self._queue: deque[_Ticket] = deque()
        self._active: dict[int, _Ticket] = {}  # id(waiter) -> ticket
        self._in_step: list[_Ticket] = []
        self._pending: list[Call] = []
        self._running = False
        self._cost: dict[int, float] = {}  # id(handle) -> seconds its part of the last round took
        self._last_event = time.monotonic()
        self._local = threading.local()
        self.runner = runner or Runner()  # the rounds' thread (see the module docstring)

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
        ticket = _Ticket(waiter, threading.get_ident())
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
    def _lend(self, ticket: _Ticket) -> Iterator[None]:
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

    def current(self) -> _Ticket | None:
        """The ticket of the step running in this thread (None outside a batched step)."""
        return getattr(self._local, "ticket", None)

    def _take_baton(self, ticket: _Ticket) -> None:
        take(self._baton, ticket.waiter)
        ticket.baton = True

    def _touch(self) -> None:
        """Something happened (call with the condition held): wake the waiters, restart the
        window."""
        self._last_event = time.monotonic()
        self._cond.notify_all()

    # ---- rounds ------------------------------------------------------------------------------
    def _await(self, call: Call) -> None:
        with self._cond:
            while not call.done:
                try:
                    call.ticket.waiter.check()
                except BaseException:
                    if call in self._pending:  # not taken by a round: it never runs
                        self._pending.remove(call)
                        self._touch()
                    raise
                if not self._running and self._due():
                    self._lead()
                    continue
                idle = time.monotonic() - self._last_event
                self._cond.wait(max(0.001, min(SLICE_S, self.window_s - idle))
                                if self._pending and not self._running else SLICE_S)

    def _due(self) -> bool:
        """Every live request inside a step waits for a forward (or on another process), or the
        window ran out."""
        if not self._pending:
            return False
        waiting = {id(c.ticket) for c in self._pending}
        if all(id(t) in waiting or t.lent for t in self._in_step if t.live):
            return True
        return time.monotonic() - self._last_event >= self.window_s

    def _lead(self) -> None:
        """Run a round over the pending calls `_pick` chooses, with the condition released
        meanwhile."""
        calls = self._pick()
        self._running = True
        self._cond.release()
        try:
            self.runner.run(self._run, calls)
        finally:
            self._cond.acquire()
            self._running = False
            self.stats.rounds += 1
            for call in calls:
                if not call.done:  # interrupted mid-round
                    call.error, call.done = RuntimeError("the batching round was interrupted"), True
            self._touch()

    def _pick(self) -> list[Call]:
        """Take the round's calls from the pending ones: those of the model with the most waiting
        calls (the longest-waiting model on a tie), and of any model whose oldest call has waited
        at least as long as that model's last round took (0 before its first); the rest stay."""
        models: dict[int, list[Call]] = {}
        for call in self._pending:
            models.setdefault(id(call.handle), []).append(call)
        now = time.monotonic()
        chosen = {id(max(models.values(), key=len)[0].handle)}
        chosen |= {key for key, calls in models.items()
                   if now - calls[0].submitted >= self._cost.get(key, 0.0)}
        picked = [c for c in self._pending if id(c.handle) in chosen]
        self._pending = [c for c in self._pending if id(c.handle) not in chosen]
        return picked

    @torch.inference_mode()
    def _run(self, calls: Sequence[Call]) -> None:
        """Per model, in submission order: the batchable rows in padded forwards, the rest alone."""
        handles: dict[int, list[Call]] = {}
        for call in calls:
            handles.setdefault(id(call.handle), []).append(call)
        for key, group in handles.items():
            t0 = time.perf_counter()
            rows = [c for c in group if c.batchable()]
            for call in group:
                if call not in rows:
                    self._solo(call)
            for chunk in chunks(rows, self.max_batch_rows):
                if len(chunk) == 1:  # alone, or one call with more rows than the bound
                    self._solo(chunk[0])
                else:
                    self._batched(chunk)
            if max(c.tokens for c in group) <= PAD_FREE_TOKENS:  # a prefill is no typical cost
                with self._cond:
                    self._cost[key] = time.perf_counter() - t0

    def _solo(self, call: Call) -> None:
        run_alone(call)
        with self._cond:
            self.stats.count(call.rows, requests=1)

    def _batched(self, chunk: list[Call]) -> None:
        if not run_together(chunk):
            # one row's failure must not fail the others: run each alone (nothing changed)
            for call in chunk:
                self._solo(call)
            return
        with self._cond:
            self.stats.count(sum(c.rows for c in chunk), requests=len(chunk))


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

