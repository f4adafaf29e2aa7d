"""Which threads run torch's parallel CPU ops (issue 19): one thread for a batching engine's
forwards, one OpenMP thread for the request threads around them.

With an OpenMP build of torch (the CPU wheels link libgomp) every OS thread that runs a parallel op
keeps its own team of OpenMP workers for the rest of its life, and once there are more of them than
CPUs, libgomp stops letting idle workers spin: every op of every forward then puts its workers to
sleep and wakes them. On the 2-core development VM that made an 8-row decode of the 0.5B draft
1.33x slower (`benchmarks/omp_threads.py`, `benchmarks/results/omp-threads-cpu2core/`). A
batching engine hands every forward to one runner thread (`scheduler.Batcher`), and its request
threads run the code between forwards (sampling, acceptance, scoring: ops over a few rows of
logits) inside `one_omp_thread()`, so no thread but the runner starts a team (1.05x). Both
OpenMP's own count and that of the MKL inside torch (its vector maths, e.g. `exp`, start OpenMP
teams of MKL's count) are per-thread settings, so the runner keeps its threads meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import torch


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
