"""`one_omp_thread`: a request thread's torch ops start no OpenMP team of workers (they would
make every forward of a batching engine's runner thread slower on a multi-core CPU), and the
thread's own setting comes back afterwards."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from specguard_core.concurrency.cpu_runner import Runner, one_omp_thread

OPENMP = "OpenMP" in torch.__config__.parallel_info() and Path("/proc/self/task").is_dir()


def _os_threads() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _ops() -> None:
    """Ops a step runs between forwards: row-wise softmax and exp (MKL's vector maths) over
    logits-sized tensors, large enough to go parallel."""
    logits = torch.randn(17, 151_936)
    torch.softmax(logits, -1).argmax(-1)
    torch.exp(torch.log_softmax(logits, -1))


def _threads_started_by(body: Callable[[], None]) -> int:
    """OS threads started while `body` ran in a fresh thread (its OpenMP workers, if any; threads
    that end meanwhile do not count)."""
    out: list[int] = []

    def run() -> None:
        before = _os_threads()
        body()
        out.append(len(_os_threads() - before))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


@pytest.mark.skipif(not OPENMP, reason="needs torch built with OpenMP, on Linux")
def test_ops_inside_start_no_openmp_team_and_the_setting_comes_back() -> None:
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("torch runs one thread here: no OpenMP team to start")

    def limited() -> None:
        with one_omp_thread():
            assert torch.get_num_threads() == 1
            _ops()
        assert torch.get_num_threads() == threads  # this thread's own count again

    assert _threads_started_by(limited) == 0
    assert _threads_started_by(_ops) > 0  # the same ops without it start a team: the check bites


def test_other_threads_keep_their_count_meanwhile() -> None:
    before, inside, done, seen = threading.Event(), threading.Event(), threading.Event(), []

    def other() -> None:
        seen.append(torch.get_num_threads())  # this thread's count, set on its first use
        before.set()
        inside.wait(10)
        seen.append(torch.get_num_threads())  # while the test's thread is limited
        done.set()

    t = threading.Thread(target=other)
    t.start()
    before.wait(10)
    with one_omp_thread():
        inside.set()
        done.wait(10)
    t.join(timeout=10)
    assert len(seen) == 2 and seen[0] == seen[1] == torch.get_num_threads()


def test_a_runner_runs_calls_on_its_one_thread_and_hands_back_results_and_errors() -> None:
    runner = Runner()
    ran_on = {runner.run(threading.get_ident) for _ in range(3)}
    assert len(ran_on) == 1 and threading.get_ident() not in ran_on
    assert not runner.here() and runner.run(runner.here)
    assert runner.run(lambda: runner.run(threading.get_ident)) in ran_on  # on its thread: at once
    with pytest.raises(ZeroDivisionError):
        runner.run(lambda: 1 / 0)
    assert runner.run(lambda x, y=0: x + y, 2, y=3) == 5  # and it still runs after an error


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, also where the suite was started with SIGINT ignored (a
    shell's background job), which makes `_thread.interrupt_main` a no-op."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c")
def test_an_interrupted_caller_waits_for_its_call_to_end_or_takes_it_back() -> None:
    """Ctrl-C while a forward runs must not leave it half-run; a call still queued is dropped."""
    runner, events = Runner(), []
    started, release = threading.Event(), threading.Event()

    def hold(name: str) -> None:  # runs until released
        started.set()
        release.wait(5)
        events.append(name)

    blocker = threading.Thread(target=runner.run, args=(hold, "first"))
    blocker.start()
    assert started.wait(5)  # the runner is busy with "first" until released
    threading.Timer(0.1, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        runner.run(hold, "queued")  # interrupted while queued behind "first": taken back
    release.set()
    blocker.join(timeout=5)
    assert runner.run(lambda: "drained") == "drained"  # anything queued before it has run
    assert events == ["first"]

    started.clear()
    release.clear()

    def interrupt_while_running() -> None:
        started.wait(5)
        _thread.interrupt_main()
        time.sleep(0.1)
        release.set()

    threading.Thread(target=interrupt_while_running).start()
    with pytest.raises(KeyboardInterrupt):
        runner.run(hold, "running")  # interrupted while it runs: raised once it has ended
    assert events == ["first", "running"]
    assert runner.run(lambda: "still serving") == "still serving"


def test_an_engine_runs_every_forward_of_its_cpu_models_on_its_runner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without batching too: concurrent callers take turns, but none of them runs a forward."""
    from specguard_core import SpecGuardEngine
    from specguard_core.cache.handle import ModelHandle
    from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

    engine = SpecGuardEngine(*noisy_copy_pair(tmp_path))
    assert engine.draft.runner is engine.runner and engine.target.runner is engine.runner
    ran_on: set[int] = set()
    forward = ModelHandle.forward

    def record(self: ModelHandle, *args: object, **kw: object) -> object:
        if self.runner is None or self.runner.here():  # where the forward itself runs
            ran_on.add(threading.get_ident())
        return forward(self, *args, **kw)

    monkeypatch.setattr(ModelHandle, "forward", record)
    callers: set[int] = set()
    errors: list[BaseException] = []

    def call(prompt: str) -> None:
        callers.add(threading.get_ident())
        try:
            engine.generate(prompt, max_new_tokens=12, route="score", tau=1.0)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            errors.append(err)

    threads = [threading.Thread(target=call, args=(p,)) for p in ("Hi", "What is 3 + 4?")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    call("Hello")  # and from this thread
    assert not errors and len(ran_on) == 1 and not ran_on & callers


def test_a_ready_cpu_target_handle_gets_the_engines_runner(tmp_path: Path) -> None:
    from specguard_core import SpecGuardEngine
    from specguard_core.cache.handle import ModelHandle
    from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

    draft, tok, target, target_tok = noisy_copy_pair(tmp_path)
    handle = ModelHandle(target, target_tok)
    engine = SpecGuardEngine(draft, tok, handle)
    assert engine.target is handle and handle.runner is engine.runner


def test_an_engine_and_its_models_are_freed_once_dropped(tmp_path: Path) -> None:
    """The runner's thread must not keep the last forward (and so the models) alive."""
    import gc
    import weakref

    from specguard_core import SpecGuardEngine
    from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

    draft, tok, target, target_tok = noisy_copy_pair(tmp_path)
    engine = SpecGuardEngine(draft, tok, target, target_tok)
    engine.generate("Hi", max_new_tokens=8)
    thread = engine.runner.thread
    assert thread is not None and thread.is_alive()
    models = [weakref.ref(draft), weakref.ref(target)]
    del engine, draft, target
    gc.collect()
    assert all(m() is None for m in models)
    thread.join(timeout=5)  # and the runner's thread ends with it
    assert not thread.is_alive()
