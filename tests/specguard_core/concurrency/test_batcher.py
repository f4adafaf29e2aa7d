"""The batching scheduler: concurrent requests share forwards and still get exactly their serial
results; cancelling or timing out one request changes nobody else's; the row and admission bounds
hold under a crowd (float32 tiny models, random weights)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.concurrency import rounds
from specguard_core.concurrency.batcher import Batcher, BatchingHandle
from specguard_core.text.chat import InputError
from specguard_core.types import Cancelled, GenerationResult
from tests.fixtures import WEATHER
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import all_ids

GREEDY = dict(k=1, temperature=0.0, max_new_tokens=40, max_step_tokens=10, fallback="speculative")
SHORT = "What is 3 + 4?"
LONG = "Please reason step by step about this question, which has many words in it. " * 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Any]:
    """A pair whose draft partly disagrees with its target (kept, checked and verified steps)."""
    return noisy_copy_pair(tmp_path_factory.mktemp("noisy"))


def engines(pair: tuple[Any, Any, Any, Any], **batching: Any
            ) -> tuple[SpecGuardEngine, SpecGuardEngine]:
    """(serial, batched) engines over the same models."""
    cfg = SpecGuardConfig(**GREEDY)
    return (SpecGuardEngine(*pair, config=cfg),
            SpecGuardEngine(*pair, config=cfg,
                            engine_config=EngineConfig(batching=True, **batching)))


def concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in one thread each, started together; their results (or errors) in order."""
    out: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            out[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a request hung"
    return out


def same(a: GenerationResult, b: GenerationResult) -> bool:
    return (all_ids(a) == all_ids(b) and a.raw_text == b.raw_text
            and a.finish_reason == b.finish_reason and [s.path for s in a.steps] ==
            [s.path for s in b.steps] and a.tool_calls == b.tool_calls)


def test_concurrent_requests_equal_their_serial_runs(
        noisy_pair_on: tuple[Any, Any, Any, Any]) -> None:
    """On each test device (`noisy_pair_on` is the module's `pair` there)."""
    serial, batched = engines(noisy_pair_on)
    assert isinstance(batched.draft, BatchingHandle) and isinstance(batched.target, BatchingHandle)
    scores = sorted(s.score for s in serial.generate(SHORT, tau=-math.inf).steps
                    if s.score is not None)
    text = serial.generate(LONG, tau=math.inf).raw_text
    requests: list[tuple[Any, dict[str, Any]]] = [
        (SHORT, dict(tau=math.inf)),  # every step through the speculative fallback
        (LONG, dict(tau=scores[len(scores) // 2])),  # some kept, some verified
        ("Hi", dict(tau=-math.inf)),  # every draft step kept
        (LONG, dict(tau_accept=math.inf, check_tokens=3)),  # the target checks while the draft writes
        ("Weather in Paris?", dict(tools=[WEATHER], tool_choice="required", fallback="greedy",
                                   tau=math.inf)),  # forced call prefix, target regenerates
        (LONG, dict(tau=math.inf, stop=[text[12:15]])),  # a stop string ends it early
        (SHORT, dict(k=3, temperature=0.8, seed=5, tau=0.5)),  # forked rows, seeded
    ]
    want = [serial.generate(prompt, **kw) for prompt, kw in requests]
    assert want[5].finish_reason == "stop" and len(want[5].raw_text) < len(text)
    got = concurrently([lambda p=prompt, kw=kw: batched.generate(p, **kw)
                        for prompt, kw in requests])
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert not isinstance(g, BaseException), f"request {i} failed: {g!r}"
        assert same(w, g), f"request {i} differs from its serial run"
    stats = batched.batcher.stats if batched.batcher else None
    assert stats is not None and stats.batched_forwards > 0 and stats.max_rows >= 3
    assert batched.batcher is not None and batched.batcher.active == 0


def test_cancelling_one_request_mid_batch_changes_nobody_else(
        pair: tuple[Any, Any, Any, Any]) -> None:
    serial, batched = engines(pair, max_active_requests=3)
    others = [(SHORT, dict(tau=math.inf)), (LONG, dict()), ("Hi", dict(tau=math.inf))]
    want = [serial.generate(p, **kw) for p, kw in others]
    victim = batched.stream(LONG, tau=math.inf, max_new_tokens=400, max_step_tokens=400)
    assert batched.batcher is not None

    def cancel_mid_batch() -> list[Any]:
        for _ in victim:
            pass
        return []

    def close_later() -> None:
        deadline = time.monotonic() + 60
        while batched.batcher is not None and batched.batcher.stats.batched_forwards < 5:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        victim.close()  # from another thread, while its forwards are in the rounds

    closer = threading.Thread(target=close_later)
    closer.start()
    # three places: the victim and two others; the third other waits until the victim frees one
    got = concurrently([cancel_mid_batch] + [lambda p=p, kw=kw: batched.generate(p, **kw)
                                             for p, kw in others])
    closer.join(timeout=60)
    assert victim.cancelled and got[0] == []
    with pytest.raises(RuntimeError, match="not finished"):
        _ = victim.result
    for w, g in zip(want, got[1:], strict=True):
        assert not isinstance(g, BaseException) and same(w, g)
    assert batched.batcher.active == 0 and batched.batcher.stats.max_active <= 3
    assert same(batched.generate(SHORT, tau=math.inf), want[0])  # still usable


def test_a_queued_request_honours_its_timeout(pair: tuple[Any, Any, Any, Any]) -> None:
    _, batched = engines(pair, max_active_requests=1)
    busy = batched.stream(LONG, max_new_tokens=40)
    # admitted in another thread (one thread waiting for its own place is an error, tested below)
    starter = threading.Thread(target=lambda: next(busy))
    starter.start()
    starter.join()  # it holds the only place until it ends
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        batched.generate(SHORT, timeout=0.2)
    assert time.perf_counter() - t0 < 1.0
    busy.close()  # frees the place at once
    assert batched.generate(SHORT, max_new_tokens=5).usage.completion_tokens == 5


def test_bounds_hold_with_64_queued_requests(pair: tuple[Any, Any, Any, Any]) -> None:
    serial, batched = engines(pair, max_batch_rows=4, max_active_requests=6)
    prompts = [SHORT, LONG, "Hi", "Count to ten, please."]
    run = dict(max_new_tokens=6, tau=math.inf)
    want = {p: serial.generate(p, **run) for p in prompts}
    got = concurrently([lambda p=prompts[i % 4]: batched.generate(p, **run) for i in range(64)])
    for i, g in enumerate(got):
        assert not isinstance(g, BaseException), f"request {i} failed: {g!r}"
        assert same(want[prompts[i % 4]], g)
    assert batched.batcher is not None
    stats = batched.batcher.stats
    assert stats.max_rows <= 4 and stats.max_active <= 6
    assert stats.max_rows == 4 and stats.max_active == 6  # the bounds were reached, not avoided
    assert batched.batcher.active == 0
    assert same(batched.generate(SHORT, **run), want[SHORT])  # usable afterwards


def test_rows_are_grouped_so_a_long_row_never_pads_many_short_ones() -> None:
    class _Call:  # only the length and the rows matter to the grouping
        def __init__(self, tokens: int, rows: int = 1) -> None:
            self.tokens, self.rows = tokens, rows

    calls = [_Call(n) for n in (1, 200, 1, 8, 1, 1, 7)]
    chunks = rounds.chunks(calls, 3)  # type: ignore[arg-type]
    assert [[c.tokens for c in chunk] for chunk in chunks] == [[200, 8], [7, 1, 1], [1, 1]]
    # a forked proposal's call brings its k rows: at most max_batch_rows rows per forward
    forked = [_Call(1, 2), _Call(1, 1), _Call(1, 3), _Call(1, 1)]
    chunks = rounds.chunks(forked, 4)  # type: ignore[arg-type]
    assert [[c.rows for c in chunk] for chunk in chunks] == [[2, 1], [3, 1]]


def test_batching_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="max_batch_rows"):
        EngineConfig(batching=True, max_batch_rows=0)
    assert Batcher.of(EngineConfig()) is None


def test_a_round_serves_the_busiest_model_and_never_starves_the_other() -> None:
    draft, target_model = object(), object()  # only the model and the submission time matter

    class _Call:
        def __init__(self, handle: object) -> None:
            self.handle, self.submitted = handle, time.monotonic()

    batcher = Batcher()
    target = _Call(target_model)
    batcher._cost[id(target_model)] = 0.2  # the target's last round took 0.2 s
    batcher._pending = [target] + [_Call(draft) for _ in range(3)]  # type: ignore[list-item]
    picked = batcher._pick()  # the draft has more calls: the target call waits
    assert [c.handle for c in picked] == [draft] * 3 and batcher._pending == [target]
    batcher._pending += picked  # the draft requests are back with their next calls
    target.submitted -= 0.2  # ... and the target call has waited as long as its forward takes
    picked = batcher._pick()
    assert target in picked and len(picked) == 4 and batcher._pending == []


class _Waiter:
    """A request as the scheduler sees it: a cancel flag and a check."""

    def __init__(self) -> None:
        self.cancel = threading.Event()

    def check(self) -> None:
        if self.cancel.is_set():
            raise Cancelled


def test_admission_is_first_come_first_served() -> None:
    batcher = Batcher(max_active_requests=1)
    first, order = _Waiter(), []
    queued = [_Waiter() for _ in range(3)]

    def enter(i: int) -> None:
        try:
            with batcher.admitted(queued[i]):
                order.append(i)
        except Cancelled:
            pass

    with batcher.admitted(first):  # holds the only place while the others queue, in order
        threads = []
        for i in range(3):
            threads.append(threading.Thread(target=enter, args=(i,)))
            threads[-1].start()
            while len(batcher._queue) < i + 1:
                time.sleep(0.001)
        queued[1].cancel.set()  # a cancelled request leaves the queue without its turn
        threads[1].join(timeout=5)
    for t in threads:
        t.join(timeout=5)
    assert order == [0, 2] and batcher.active == 0 and not batcher._queue


def test_a_request_busy_between_forwards_holds_up_a_round_only_for_the_window(
        pair: tuple[Any, Any, Any, Any]) -> None:
    """The round runs while the busy request still holds the baton (e.g. waiting for a served
    target's answer); the quick request reads its result once the baton is free again."""
    batcher = Batcher(window_s=0.05)
    handle = BatchingHandle(pair[2], pair[3], batcher)
    busy, quick = _Waiter(), _Waiter()
    state = handle.new_state()
    has_baton = threading.Event()
    ran_after: list[float] = []

    def quick_request() -> None:
        with batcher.admitted(quick), batcher.step(quick):
            has_baton.set()
            while len(batcher._in_step) < 2:  # the busy one is inside its step too
                time.sleep(0.001)
            handle.forward(state, torch.tensor([[5, 6, 7]]))

    def busy_request() -> None:
        has_baton.wait(5)
        with batcher.admitted(busy), batcher.step(busy):
            t0 = time.perf_counter()  # it holds the baton from here, and never submits
            while state.cache is not None and state.cache.get_seq_length() < 3:
                assert time.perf_counter() - t0 < 5, "the round waited for the busy request"
                time.sleep(0.005)
            ran_after.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=quick_request), threading.Thread(target=busy_request)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert ran_after and ran_after[0] < 1.0 and batcher.stats.rounds == 1


def test_one_failing_row_does_not_fail_its_batch_mates(pair: tuple[Any, Any, Any, Any],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A batched forward that fails (here the first three, as an out-of-memory could) is run again
    call by call, so the requests in it get their own results."""
    from specguard_core.concurrency import rounds

    serial, batched = engines(pair)
    real = rounds.forward_rows
    failed: list[int] = []

    def flaky(handle: Any, states: Any, ids: list[torch.Tensor], **kw: Any) -> Any:
        if len(ids) > 1 and len(failed) < 3:  # several requests' calls in one forward
            failed.append(len(ids))
            raise RuntimeError("out of memory, say")
        return real(handle, states, ids, **kw)

    monkeypatch.setattr(rounds, "forward_rows", flaky)
    prompts = ["What is 3 + 4?", "word " * 20, "Hi"]
    got = concurrently([lambda p=p: batched.generate(p) for p in prompts])
    assert all(same(g, serial.generate(p)) for g, p in zip(got, prompts, strict=True))
    assert len(failed) == 3  # the failing batched forwards did happen


def test_forked_proposals_of_concurrent_requests_share_forwards(
        pair: tuple[Any, Any, Any, Any]) -> None:
    """k > 1 proposals (the paper preset's shape) join the rounds with their k rows each; every
    sampled request keeps its own seed stream and equals its serial run."""
    serial, batched = engines(pair)
    requests = [(SHORT, dict(k=3, temperature=0.8, seed=5, tau=0.5)),
                (LONG, dict(k=3, temperature=0.7, top_p=0.8, seed=11, tau=0.6)),
                ("Hi", dict(k=2, temperature=1.0, seed=3, tau=-math.inf))]  # k=2: a medoid tie
    want = [serial.generate(prompt, **kw) for prompt, kw in requests]
    got = concurrently([lambda p=prompt, kw=kw: batched.generate(p, **kw)
                        for prompt, kw in requests])
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert not isinstance(g, BaseException), f"request {i} failed: {g!r}"
        assert same(w, g), f"request {i} differs from its serial run"
    assert batched.batcher is not None
    stats = batched.batcher.stats
    assert stats.batched_forwards > 0 and stats.max_rows >= 5  # two proposals in one forward
    assert any(rows in stats.row_counts for rows in (5, 6, 8))


def test_a_lone_forked_proposal_is_not_counted_as_batched(pair: tuple[Any, Any, Any, Any]) -> None:
    _, batched = engines(pair)
    batched.generate("What is 3 + 4?", k=3, temperature=0.8, seed=5, tau=0.5)
    assert batched.batcher is not None and batched.batcher.stats.batched_forwards == 0


def test_one_thread_holding_every_place_gets_an_error_not_a_deadlock(
        pair: tuple[Any, Any, Any, Any]) -> None:
    _, batched = engines(pair, max_active_requests=2)
    streams = [batched.stream("Hi") for _ in range(3)]
    with pytest.raises(InputError, match="read or close"):
        for _ in zip(*streams, strict=False):
            pass
    for s in streams:
        s.close()
    assert batched.batcher is not None and batched.batcher.active == 0
    assert batched.generate("Hi").text is not None  # still usable


def test_every_forward_runs_on_the_one_runner_thread(pair: tuple[Any, Any, Any, Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever request leads a round, its forwards run on the batcher's runner thread (one
    OpenMP team for all of them: `concurrency/cpu_runner.py`), never on a request's own thread."""
    _, batched = engines(pair)
    ran_on: set[int] = set()
    padded, solo = rounds.forward_rows, rounds.ModelHandle.forward

    def record_padded(*args: Any, **kw: Any) -> Any:
        ran_on.add(threading.get_ident())
        return padded(*args, **kw)

    def record_solo(*args: Any, **kw: Any) -> Any:
        ran_on.add(threading.get_ident())
        return solo(*args, **kw)

    monkeypatch.setattr(rounds, "forward_rows", record_padded)
    monkeypatch.setattr(rounds.ModelHandle, "forward", record_solo)
    requesters: set[int] = set()

    def request(prompt: str) -> GenerationResult:
        requesters.add(threading.get_ident())
        return batched.generate(prompt, tau=math.inf)

    got = concurrently([lambda p=p: request(p) for p in (SHORT, LONG, "Hi")])
    assert all(isinstance(g, GenerationResult) for g in got)
    assert len(ran_on) == 1 and not ran_on & requesters
