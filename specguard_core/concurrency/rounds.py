"""What one scheduling round runs (led by `leader.RoundLeader`): the forwards requests wait for
(`Call`), how they are grouped into padded forwards (`chunks`), and running them alone
(`run_alone`) or together (`run_together`, over `padded.forward_rows`). `Ticket` is a request's
place in the scheduler, `SchedulerStats` what the scheduler counts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState, Forward
from specguard_core.concurrency.padded import forward_rows
from specguard_core.concurrency.turns import Waiter

# Padding short rows up to this many tokens per forward is cheap next to running them apart: on the
# measured CPU 8 rows x 8 tokens cost 2.2x one 1-token decode of the target, 8 solo passes 8x
# (`benchmarks/batch_forward.py`; its results: benchmarks/results/batch-forward-cpu1core/ at e60e8f5).
PAD_FREE_TOKENS = 64


@dataclass(eq=False)
class Ticket:
    """A request's place in the scheduler; `baton` while its step code runs, `lent` while it
    waits on another process (`turns.waiting_io`)."""

    waiter: Waiter
    thread: int = 0  # the thread that asked for the place
    baton: bool = False
    lent: bool = False

    @property
    def live(self) -> bool:
        return not self.waiter.cancel.is_set()


@dataclass(eq=False)
class Call:
    """One forward a request waits for: `ModelHandle.forward`'s arguments, then its result.
    `ticket` is the waiting request's place in the scheduler."""

    handle: ModelHandle
    state: CacheState
    input_ids: torch.Tensor  # [b, q]
    all_logits: bool
    hidden: bool
    recorder: AttentionRecorder | None
    tentative: bool
    ticket: Ticket
    result: Forward | None = None
    error: BaseException | None = None
    done: bool = False
    submitted: float = field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def batchable(self) -> bool:
        """A row per cache row (1, or a forked proposal's k) of full-attention layers (what
        `forward_rows` takes)."""
        return self.handle.batch_problem(self.state, rows=self.rows) is None


@dataclass
class SchedulerStats:
    """What the scheduler observed: rounds run, forwards (batched: more than one request's rows),
    the most rows in one forward (a forked proposal brings k) and the most requests admitted at
    once."""

    rounds: int = 0
    forwards: int = 0
    batched_forwards: int = 0
    rows: int = 0
    max_rows: int = 0
    max_active: int = 0
    row_counts: dict[int, int] = field(default_factory=dict)  # rows per forward -> forwards

    def count(self, rows: int, requests: int) -> None:
        self.forwards += 1
        self.batched_forwards += requests > 1
        self.rows += rows
        self.max_rows = max(self.max_rows, rows)
        self.row_counts[rows] = self.row_counts.get(rows, 0) + 1


def chunks(calls: Sequence[Call], max_rows: int) -> list[list[Call]]:
    """Calls into forwards of at most `max_rows` rows, longest first; a call joins a forward while
    the padded size stays within `PAD_FREE_TOKENS` or twice the real tokens. A call with more rows
    than `max_rows` is a forward of its own."""
    out: list[list[Call]] = []
    real = rows = 0
    for call in sorted(calls, key=lambda c: -c.tokens):
        chunk = out[-1] if out else None
        if chunk is not None and rows + call.rows <= max_rows:
            width = chunk[0].tokens  # the longest row: every row is padded to it
            padded = (rows + call.rows) * width
            if padded <= max(PAD_FREE_TOKENS, 2 * (real + call.rows * call.tokens)):
                chunk.append(call)
                real += call.rows * call.tokens
                rows += call.rows
                continue
        out.append([call])
        real, rows = call.rows * call.tokens, call.rows
    return out


def run_alone(call: Call) -> None:
    """Run `call` as the plain `ModelHandle.forward`; its error goes to the request's thread."""
    try:
        call.result = ModelHandle.forward(
            call.handle, call.state, call.input_ids, all_logits=call.all_logits,
            hidden=call.hidden, recorder=call.recorder, tentative=call.tentative)
    except Exception as err:  # the request's own thread raises it
        call.error = err
    call.done = True


def run_together(chunk: Sequence[Call]) -> bool:
    """Run the calls of one model as one padded forward; False (and nothing changed: no cache,
    no call) when it fails, so the caller can run them alone."""
    recorders = [c.recorder for c in chunk]
    try:
        outs = forward_rows(
            chunk[0].handle, [c.state for c in chunk], [c.input_ids for c in chunk],
            all_logits=[c.all_logits for c in chunk], hidden=any(c.hidden for c in chunk),
            recorders=recorders if any(r is not None for r in recorders) else None,
            tentative=[c.tentative for c in chunk])
    except Exception:
        return False
    for call, out in zip(chunk, outs, strict=True):
        call.result = out if call.hidden else Forward(out.logits, None, None)
        call.done = True
    return True
