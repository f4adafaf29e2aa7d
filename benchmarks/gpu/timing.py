"""Timing of one operation: CUDA events on a GPU, `time.perf_counter` on a CPU; median of repeats.

On a GPU each repeat records an event before and after the operation and waits for the second one,
so the time is the device's (the operation's launches included, the host's idle wait excluded).
The reset between repeats (cropping a cache back) runs outside the timed span.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


class Timer:
    """`median(fn, reset)`: the median seconds of `repeats` calls of `fn` after `warmup` ones."""

    def __init__(self, device: str, warmup: int = 2, repeats: int = 5) -> None:
        if warmup < 0 or repeats < 1:
            raise ValueError(f"warmup must be >= 0 and repeats >= 1 (got {warmup}, {repeats})")
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.warmup, self.repeats = warmup, repeats

    @property
    def kind(self) -> str:
        return "cuda-events" if self.cuda else "perf_counter"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def once(self, fn: Callable[[], Any]) -> float:
        """Seconds of one call of `fn`."""
        if not self.cuda:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.sync()
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1000.0

    def median(self, fn: Callable[[], Any], reset: Callable[[], None] | None = None,
               repeats: int | None = None) -> float:
        """The median seconds of `fn` over `repeats` (default: the timer's), `reset()` after every
        call (warm-up calls included), untimed."""
        for _ in range(self.warmup):
            fn()
            if reset is not None:
                reset()
        times = []
        for _ in range(repeats or self.repeats):
            times.append(self.once(fn))
            if reset is not None:
                reset()
        return statistics.median(times)
