"""Requests take turns step by step: a stream left half-read blocks nobody, a caller can use the
engine while it iterates a stream, close()/timeouts stop work within one forward pass, and a step
waiting on another process lends its turn."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from specguard_core import SpecGuardConfig
from specguard_core.concurrency.turns import Turns, waiting_io
from specguard_core.testing import scripted_engine
from specguard_core.types import Cancelled

ANSWER = "First, 3 + 4 = 7.\n\nThen 7 * 6 = 42.\n\nThe answer is 42."
LONG = "word " * 200  # one long step: 200+ decode steps without a step boundary
CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=400, max_step_tokens=400)


def slow(engine: Any, seconds: float) -> None:
    """Make every draft and target forward pass take at least `seconds`."""
    for handle in (engine.draft, engine.target):
        forward = handle.model.forward

        def delayed(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return _forward(*args, **kwargs)

        handle.model.forward = delayed


def test_a_half_read_stream_blocks_no_other_caller() -> None:
    engine = scripted_engine(lambda p: ANSWER, config=CFG)
    idle = engine.stream("Go")
    first = next(idle)  # ... and then left alone, still referenced
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(engine.generate("Go").raw_text))
    worker.start()
    worker.join(timeout=30)
    assert done == [ANSWER], "another caller was blocked by a half-read stream"
    rest = [s.text for s in idle]  # the idle stream still finishes, with its own state
    assert first.text + "".join(rest) == ANSWER and idle.result.raw_text == ANSWER


def test_the_same_thread_can_generate_while_iterating_a_stream() -> None:
    engine = scripted_engine(lambda p: ANSWER, config=CFG)
    texts = []
    for step in engine.stream("Go"):
        texts.append(step.text)
        assert engine.generate("Go").raw_text == ANSWER  # no deadlock, no shared state
    assert "".join(texts) == ANSWER


def test_close_from_another_thread_stops_within_a_forward_pass() -> None:
    engine = scripted_engine(lambda p: LONG, config=CFG)
    slow(engine, 0.01)
    stream = engine.stream("Go")
    timer = threading.Timer(0.3, stream.close)
    timer.start()
    t0 = time.perf_counter()
    steps = list(stream)  # the one long step (200+ passes, > 2 s) is cut short
    elapsed = time.perf_counter() - t0
    assert steps == [] and stream.cancelled and elapsed < 1.5
    with pytest.raises(RuntimeError, match="not finished"):
        _ = stream.result
    assert engine.generate("Go", max_new_tokens=5).usage.completion_tokens == 5  # still usable


def test_a_timeout_stops_work_mid_step_and_while_waiting() -> None:
    engine = scripted_engine(lambda p: LONG, config=CFG)
    slow(engine, 0.01)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="timeout of 0.3s"):
        engine.generate("Go", timeout=0.3)
    assert time.perf_counter() - t0 < 1.5  # the step alone takes > 2 s
    # waiting for the engine counts too: a caller queued behind a long step gives up in time
    busy = threading.Thread(target=lambda: engine.generate("Go", max_new_tokens=60))
    busy.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        engine.generate("Go", timeout=0.2)
    assert time.perf_counter() - t0 < 1.0
    busy.join(timeout=30)
    with pytest.raises(ValueError, match="timeout must be a positive"):
        engine.stream("Go", timeout=0)


class _Waiter:
    def __init__(self) -> None:
        self.cancel = threading.Event()

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()


def test_a_step_waiting_on_io_lends_its_turn_and_takes_it_back() -> None:
    turns, order = Turns(), []
    lent, other_done = threading.Event(), threading.Event()

    def first() -> None:
        with turns.step(_Waiter()):
            order.append("first starts")
            with waiting_io():
                lent.set()
                assert other_done.wait(10), "the other step never ran while this one waited"
            order.append("first ends")

    def second() -> None:
        assert lent.wait(10)
        with turns.step(_Waiter()):
            order.append("second")
        other_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert order == ["first starts", "second", "first ends"]
    with waiting_io():  # outside a step: nothing to lend
        assert turns._lock.acquire(timeout=1)
    turns._lock.release()


def test_a_nested_wait_lends_nothing_more_and_a_cancel_during_a_wait_stops_the_step() -> None:
    turns, waiter = Turns(), _Waiter()
    with pytest.raises(Cancelled):
        with turns.step(waiter):
            with waiting_io():
                with waiting_io():  # nested: no second release of the lock
                    pass
                assert turns._lock.acquire(timeout=1)  # lent: free to take
                turns._lock.release()
                waiter.cancel.set()  # cancelled while nobody holds the turn
            pytest.fail("a cancelled request went on after its wait")
    assert turns._lock.acquire(timeout=1)
    turns._lock.release()


def test_a_request_cancelled_while_its_turn_is_lent_stops_and_frees_the_turn() -> None:
    turns, waiter = Turns(), _Waiter()
    lent, release_other = threading.Event(), threading.Event()

    def other() -> None:
        assert lent.wait(10)
        with turns.step(_Waiter()):  # holds the turn while the first one is cancelled
            release_other.wait(10)

    worker = threading.Thread(target=other)
    worker.start()
    with pytest.raises(Cancelled):
        with turns.step(waiter):
            with waiting_io():
                lent.set()
                time.sleep(0.2)  # the other step takes the turn
                waiter.cancel.set()
            pytest.fail("a cancelled request went on after its wait")
    release_other.set()
    worker.join(timeout=30)
    assert turns._lock.acquire(timeout=1)  # nobody holds it, nothing released twice
