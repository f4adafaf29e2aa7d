"""Which threads run torch's parallel CPU ops: one `Runner` thread for an engine's
forwards, one OpenMP thread for the request threads around them.

With an OpenMP build of torch (the CPU wheels link libgomp) every OS thread that runs a parallel op
keeps its own team of OpenMP workers for the rest of its life, and once there are more of them than
CPUs, libgomp stops letting idle workers spin: every op of every forward then puts its workers to
sleep and wakes them. On the 2-core development VM, 8 threads taking turns made an 8-row decode of
the 0.5B draft 1.34x slower (`benchmarks/omp_threads.py`, `benchmarks/notes/2026-12-01-cpu-runner-thread.md`).
So an engine hands every forward of its CPU models to its one `Runner` thread (a batching engine's
rounds run there too), and its request threads run the code between forwards (sampling, acceptance,
scoring: ops over a few rows of logits) inside `one_omp_thread()`, so they start no team of their
own (1.05x; a thread that ran torch ops before, e.g. one that loaded the models, keeps the team it
has). OpenMP's count and that of the MKL inside torch (its vector maths, e.g. `exp`, start OpenMP
teams of MKL's count) are per-thread settings, so the runner keeps its threads meanwhile.

torch is imported inside the functions: `turns` (torch-free) uses this module.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
SLICE_S = 0.05  # how often a caller waiting on the runner looks for an interrupt
_outer = threading.local()  # inside one_omp_thread: the thread's torch thread count before it


@cache
def _openmp() -> Any:
    """threadpoolctl's controller of the OpenMP runtimes loaded in this process (torch's is
    loaded by now; found once), or None where there is none or they cannot be reached."""
    try:
        from threadpoolctl import ThreadpoolController
        openmp = ThreadpoolController().select(user_api="openmp")
    except Exception:  # a platform threadpoolctl cannot inspect: the limit is a no-op there
        return None
    return openmp if openmp.lib_controllers else None


@cache
def _mkl_local() -> Any:
    """MKL's `mkl_set_num_threads_local` inside torch's CPU library (it returns the thread's
    earlier setting; 0 = MKL's global count), or None where torch has no MKL or it cannot be
    reached."""
    import torch

    if not torch.backends.mkl.is_available():
        return None
    try:
        import ctypes

        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        setter = lib.MKL_Set_Num_Threads_Local  # the C entry (the lower-case one is Fortran)
    except (OSError, AttributeError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter


def torch_threads() -> int:
    """The torch thread count the calling thread works with: its own, or inside
    `one_omp_thread` the one it had before (what its forwards should run with)."""
    import torch

    before = torch_threads_before()
    return before if before is not None else int(torch.get_num_threads())


def torch_threads_before() -> int | None:
    """Inside `one_omp_thread`, the calling thread's torch thread count before it; else None."""
    count = getattr(_outer, "threads", None)
    return count if isinstance(count, int) else None


@contextmanager
def one_omp_thread() -> Iterator[None]:
    """Inside, the calling thread's OpenMP and MKL ops run on that thread alone (no team of
    workers is started for it); afterwards its settings are what they were. Both are per-thread,
    so other threads (the runner's forwards) keep theirs. A no-op where no OpenMP runtime is
    loaded or it cannot be reached."""
    import torch

    openmp = _openmp()
    if openmp is None or torch_threads_before() is not None:  # none, or already inside
        yield
        return
    _outer.threads = torch.get_num_threads()  # torch sets a thread's count on its first op: first
    mkl = _mkl_local()
    previous = mkl(1) if mkl is not None else 0  # returns this thread's earlier setting
    try:
        with openmp.limit(limits=1):
            yield
    finally:
        if mkl is not None:
            mkl(previous)  # 0: back to MKL's global count
        _outer.threads = None


class _Job(Generic[T]):
    """One call for the runner: run at most once; a caller that stops waiting before it starts
    takes it back."""

    def __init__(self, fn: Callable[[], T], threads: int) -> None:
        self.fn, self.threads = fn, threads
        self.lock, self.done = threading.Lock(), threading.Event()
        self.state = "queued"  # -> running -> done, or -> withdrawn
        self.result: Any = None
        self.error: BaseException | None = None

    def start(self) -> bool:
        with self.lock:
            if self.state != "queued":
                return False
            self.state = "running"
            return True

    def withdraw(self) -> bool:
        """Take the job back if it has not started; False when it is running or done."""
        with self.lock:
            if self.state == "queued":
                self.state = "withdrawn"
                return True
            return False


def _serve(jobs: queue.SimpleQueue[_Job[Any] | None]) -> None:
    """The runner's thread: run jobs in order until told to stop (None)."""
    import torch

    while (job := jobs.get()) is not None:
        if job.start():
            try:
                if job.threads and torch.get_num_threads() != job.threads:
                    torch.set_num_threads(job.threads)  # the callers' count changed since
                job.result = job.fn()
            except BaseException as err:  # handed to the waiting caller
                job.error = err
            job.fn = _done  # its closure holds the caller's model and caches: let them go
            job.done.set()
        del job  # nor keep the last one here while waiting for the next


def _done() -> None:
    return None


def _stop(jobs: queue.SimpleQueue[_Job[Any] | None], thread: threading.Thread) -> None:
    jobs.put(None)
    if thread is not threading.current_thread():
        thread.join(timeout=10)


class Runner:
    """One thread that runs the calls it is given, one at a time, for the threads that wait on
    them (an engine's forwards: see the module docstring), with the torch thread count of the
    calling thread. A daemon thread, started with the first call (again in a forked child), that
    ends once the runner is gone."""

    def __init__(self, name: str = "specguard-forwards") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job[Any] | None] | None = None
        self._pid = 0  # the process that started `thread` (a forked child starts its own)
        self.thread: threading.Thread | None = None  # the running thread, once started

    def here(self) -> bool:
        """Whether the calling thread is the runner's."""
        return (self.thread is not None and threading.get_ident() == self.thread.ident
                and os.getpid() == self._pid)

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the runner's thread (at once when called there); its result or
        its error. Interrupted while waiting (Ctrl-C), the caller takes the call back if it has
        not started, else waits for it to end before raising: a forward writes the caller's
        caches, so it is never left half-run."""
        if self.here():
            return fn(*args, **kwargs)
        job: _Job[T] = _Job(lambda: fn(*args, **kwargs), torch_threads())
        self._queue().put(job)
        try:
            while not job.done.wait(SLICE_S):  # in slices: a Ctrl-C is seen while it waits
                pass
        except BaseException:
            if not job.withdraw():
                job.done.wait()
            raise
        if job.error is not None:
            raise job.error
        return job.result

    def _queue(self) -> queue.SimpleQueue[_Job[Any] | None]:
        with self._lock:
            if self._jobs is None or self._pid != os.getpid():  # first call, or a forked child
                jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
                self._jobs = jobs
                thread = threading.Thread(target=_serve, args=(jobs,), name=self.name,
                                          daemon=True)
                thread.start()
                self._pid, self.thread = os.getpid(), thread
                # the thread ends with the runner, or at exit once the program's own threads
                # have (a thread left running torch while the interpreter ends aborts it)
                weakref.finalize(self, _stop, jobs, thread)
            return self._jobs
