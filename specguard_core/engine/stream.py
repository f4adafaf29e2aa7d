"""`GenerationStream`: what `SpecGuardEngine.stream` returns, the caller's handle on one request.

It yields committed steps, holds the result once exhausted, and `close()` cancels the request from
any thread (the engine checks the flag before every forward pass)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from specguard_core.types import GenerationResult, PromptLogprobs, StepRecord


class GenerationStream(Iterator[StepRecord]):
    """Committed steps as they come; `.result` holds the `GenerationResult` once exhausted.
    `close()` (or leaving a `with` block) stops generation within one forward pass."""

    def __init__(self, steps: Iterator[StepRecord], holder: dict[str, GenerationResult],
                 cancel: threading.Event,
                 prompt: Callable[[], PromptLogprobs | None] = lambda: None) -> None:
        self._steps, self._holder, self._cancel, self._prompt = steps, holder, cancel, prompt

    @property
    def prompt_logprobs(self) -> PromptLogprobs | None:
        """The prompt as the target scored it (`prompt_logprobs=True`), as soon as the request
        has started (before its first step), else None."""
        return self._prompt()

    def __next__(self) -> StepRecord:
        if self._cancel.is_set():
            self.close()
            raise StopIteration
        return next(self._steps)

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def cancelled(self) -> bool:
        """Whether `close()` was called (the request stops, or has stopped, without a result)."""
        return self._cancel.is_set()

    def close(self) -> None:
        """Stop the request. Safe from any thread: when another thread is inside `next()`, the
        work stops before its next forward pass and that `next()` ends the iteration."""
        self._cancel.set()
        close = getattr(self._steps, "close", None)
        try:
            if close:
                close()
        except ValueError:  # "generator already executing" in another thread: the flag stops it
            pass

    @property
    def result(self) -> GenerationResult:
        if "result" not in self._holder:
            raise RuntimeError("the stream has not finished; iterate it to the end first")
        return self._holder["result"]
