"""Which threads run torch's parallel CPU ops (issue 19): one `Runner` thread for an engine's
forwards, one OpenMP thread for the request threads around them.

With an OpenMP build of torch (the CPU wheels link libgomp) every OS thread that runs a parallel op
keeps its own team of OpenMP workers for the rest of its life, and once there are more of them than
CPUs, libgomp stops letting idle workers spin: every op of every forward then puts its workers to
sleep and wakes them. On the 2-core development VM that made an 8-row decode of the 0.5B draft
1.33x slower (`benchmarks/omp_threads.py`, `benchmarks/results/omp-threads-cpu2core/`). So an
engine hands every forward of its CPU models to its one `Runner` thread (a batching engine's rounds
run there too), and its request threads run the code between forwards (sampling, acceptance,
scoring: ops over a few rows of logits) inside `one_omp_thread()`, so no thread but the runner
starts a team (1.05x). Both
OpenMP's own count and that of the MKL inside torch (its vector maths, e.g. `exp`, start OpenMP
teams of MKL's count) are per-thread settings, so the runner keeps its threads meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")


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


@contextmanager
def one_omp_thread() -> Iterator[None]:
    """Inside, the calling thread's OpenMP and MKL ops run on that thread alone (no team of
    workers is started for it); afterwards its settings are what they were. Both are per-thread,
    so other threads (the runner's forwards) keep theirs. A no-op where no OpenMP runtime is
    loaded or it cannot be reached."""
    openmp = _openmp()
    if openmp is None:
        yield
        return
    torch.get_num_threads()  # torch sets a thread's OpenMP count on its first op: let it, first
    mkl = _mkl_local()
    previous = mkl(1) if mkl is not None else 0  # returns this thread's earlier setting
    try:
        with openmp.limit(limits=1):
            yield
    finally:
        if mkl is not None:
            mkl(previous)  # 0: back to MKL's global count


class Runner:
    """One thread that runs the calls it is given, one at a time, for the threads that wait on
    them (an engine's forwards: see the module docstring). Its thread starts with the first call
    and ends once the runner is gone."""

    def __init__(self, name: str = "specguard-forwards") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._ident: int | None = None

    def here(self) -> bool:
        """Whether the calling thread is the runner's."""
        return threading.get_ident() == self._ident

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` on the runner's thread (at once when called there); its result or
        its error. Interrupted while waiting (Ctrl-C), it still waits for the call to end before
        raising: a forward writes the caller's caches, so it is never left half-run."""
        if self.here():
            return fn(*args, **kwargs)
        job = self._pool.submit(self._call, fn, args, kwargs)
        try:
            return job.result()
        except BaseException:
            wait([job])
            raise

    def _call(self, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        self._ident = threading.get_ident()
        return fn(*args, **kwargs)
