"""The batching scheduler's rounds (`RoundLeader`, which `batcher.Batcher` extends with admission
and the baton): the forwards requests wait for, when a round is due, which of them it takes, and
how it runs them.

- **When** (`_due`): every live request inside a step waits for a forward, or lends its baton while
  a served target answers (`turns.waiting_io`; cancelled requests never count), or nothing
  happened for `window_s` with forwards waiting. The waiting thread that sees it first leads the
  round (`_await`).
- **Which calls** (`_pick`): the model with the most waiting calls, plus any model whose oldest
  call has waited as long as that model's last round took (ski rental: a call passed over never
  waits more than its own forward costs, so no request starves, while calls for the target gather
  as the others draft instead of a target forward in every round).
- **How** (`_run`): per model, in submission order, through `padded.forward_rows` in forwards of at
  most `max_batch_rows` rows (a forked proposal's call brings its k rows; grouped by length by
  `rounds.chunks`, so a long prefill never pads many short rows); what cannot be batched (a
  sliding-window cache, a call with more rows than the bound) runs alone. Whichever request leads,
  the forwards run on the engine's one runner thread (`cpu_runner.Runner`; the leader waits).

One condition (`_cond`) guards the state here and the batcher's; the leader releases it while the
round runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import torch

from specguard_core.concurrency.cpu_runner import Runner
from specguard_core.concurrency.rounds import (
    PAD_FREE_TOKENS,
    Call,
    SchedulerStats,
    Ticket,
    chunks,
    run_alone,
    run_together,
)
from specguard_core.concurrency.turns import SLICE_S


class RoundLeader:
    """The waiting calls and the rounds that run them (see the module docstring)."""

    def __init__(self, max_batch_rows: int, window_s: float, runner: Runner | None) -> None:
        self.max_batch_rows = max_batch_rows
        self.window_s = window_s
        self.stats = SchedulerStats()
        self._cond = threading.Condition()
        self._in_step: list[Ticket] = []  # the requests inside a step now
        self._pending: list[Call] = []
        self._running = False
        self._cost: dict[int, float] = {}  # id(handle) -> seconds its part of the last round took
        self._last_event = time.monotonic()
        self.runner = runner or Runner()  # the rounds' thread (see the module docstring)

    def _touch(self) -> None:
        """Something happened (call with the condition held): wake the waiters, restart the
        window."""
        self._last_event = time.monotonic()
        self._cond.notify_all()

    def _await(self, call: Call) -> None:
        """Wait until `call` has run, leading a round whenever one is due and none runs."""
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
