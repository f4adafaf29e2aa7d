"""What a batched forward costs when different threads run torch work (CPU serving).

With the CPU wheels' OpenMP (libgomp), every OS thread that runs a parallel torch op keeps its own
team of worker threads for the rest of its life. Once more threads are kept than there are CPUs,
libgomp stops letting idle workers spin, so every op of every forward sleeps and wakes its workers.
A batching engine meets exactly this: its rounds are led by whichever request thread sees them due,
and every request thread runs its own sampling and acceptance ops between forwards.

This script times one 8-request decode of the default draft (`engine.batch.forward_rows`, the
rounds' forward) in four settings, each in a fresh process (a thread's team outlives its use), the
median of its repeats kept:

- `one thread`: the states prepared and every forward run by the main thread, back to back;
- `8 threads in turn`: the states prepared by the main thread (an engine's warm-up), each forward
  run by the next of 8 threads (the rounds of a batching engine before the runner thread), each
  thread running a row-wise softmax and an `exp` over `[17, V]` logits first (a target check's ops);
- `runner thread`: everything on one runner thread, handed over by the 8 threads in turn, which run
  the same ops between forwards;
- `runner thread, ops in one_omp_thread`: the same with the 8 threads' ops inside
  `engine.threads.one_omp_thread()` (what a batching engine does now).

    python benchmarks/omp_threads.py --threads 2      # both cores
    python benchmarks/omp_threads.py --threads 1      # no OpenMP teams at all: the control

Prints a markdown table; `--out DIR` also writes it (and JSON) there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState
from specguard_core.concurrency.cpu_runner import one_omp_thread
from specguard_core.concurrency.padded import forward_rows

ROWS = 8


def decode_states(handle: ModelHandle, length: int, rows: int = ROWS) -> list[CacheState]:
    """`rows` requests whose caches hold `length` prompt tokens each."""
    gen = torch.Generator().manual_seed(0)
    vocab = int(handle.model.config.get_text_config().vocab_size)
    states = []
    for _ in range(rows):
        state = handle.new_state()
        handle.extend(state, torch.randint(1, vocab, (length,), generator=gen).tolist())
        states.append(state)
    return states


def one_decode(handle: ModelHandle, states: list[CacheState]) -> Callable[[], None]:
    """One batched 1-token decode of every state, then each cache cut back (same work each time)."""
    def run() -> None:
        forward_rows(handle, states, [[5]] * len(states))
        for state in states:
            assert state.cache is not None
            state.cache.crop(-1)
    return run


def in_turn(forward: Callable[[], None], threads: int, repeats: int,
            between: Callable[[], None] | None = None) -> list[float]:
    """`threads` threads call `forward` in turn (thread i on turns i, i + threads, ...), each
    running `between` first; returns the seconds of each call."""
    turn, cond, times = [0], threading.Condition(), []

    def worker(i: int) -> None:
        for _ in range(repeats):
            with cond:
                while turn[0] % threads != i:
                    cond.wait()
            if between is not None:
                between()
            start = time.perf_counter()
            forward()
            times.append(time.perf_counter() - start)
            with cond:
                turn[0] += 1
                cond.notify_all()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return times


SETTINGS = ("one thread", "8 threads in turn", "runner thread",
            "runner thread, ops in one_omp_thread")


def measure(handle: ModelHandle, setting: str, length: int = 180, repeats: int = 4,
            threads: int = ROWS) -> float:
    """Median seconds of one batched decode in `setting` (see the module docstring)."""
    vocab = int(handle.model.config.get_text_config().vocab_size)
    # made by the thread that prepares the states, so no other thread starts a team for it
    logits: list[torch.Tensor] = []

    def ops() -> None:
        torch.exp(torch.log_softmax(logits[0], -1)).argmax(-1)

    if setting in SETTINGS[:2]:
        logits.append(torch.randn(17, vocab))
    if setting == "one thread":
        forward = one_decode(handle, decode_states(handle, length))
        forward()  # warm
        return statistics.median(_back_to_back(forward, threads * repeats))
    if setting == "8 threads in turn":
        forward = one_decode(handle, decode_states(handle, length))
        forward()
        return statistics.median(in_turn(forward, threads, repeats, between=ops))
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; one of {', '.join(SETTINGS)}")

    def limited_ops() -> None:
        with one_omp_thread():
            ops()

    with ThreadPoolExecutor(max_workers=1) as runner:
        forward = runner.submit(lambda: one_decode(handle, decode_states(handle, length))).result()
        runner.submit(forward).result()
        logits.append(runner.submit(torch.randn, 17, vocab).result())
        return statistics.median(in_turn(
            lambda: runner.submit(forward).result(), threads, repeats,
            between=ops if setting == "runner thread" else limited_ops))


def _back_to_back(forward: Callable[[], None], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    return times


def table(results: dict[str, float]) -> str:
    """The settings' seconds as a markdown table, each also against `one thread`."""
    base = results["one thread"]
    lines = ["| forwards run from | s per 8-row decode | vs one thread |", "|---|---|---|"]
    lines += [f"| {name} | {s:.3f} | {s / base:.2f}x |" for name, s in results.items()]
    return "\n".join(lines)


def main() -> None:
    from specguard_core.models.loading import load_model
    from specguard_core.models.registry import DEFAULT_DRAFT

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_DRAFT)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(),
                    help="torch intra-op threads (default: torch's choice)")
    ap.add_argument("--length", type=int, default=180, help="prompt tokens in each cache")
    ap.add_argument("--repeats", type=int, default=4, help="forwards per thread per setting")
    ap.add_argument("--out", type=Path, help="also write omp_threads-<threads>.md/.json here")
    ap.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)  # one, in this process
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.setting is None:  # each setting in a fresh process of its own
        results = {}
        for setting in SETTINGS:
            out = subprocess.run(
                [sys.executable, __file__, "--model", args.model, "--threads", str(args.threads),
                 "--length", str(args.length), "--repeats", str(args.repeats),
                 "--setting", setting], check=True, capture_output=True, text=True).stdout
            results[setting] = float(out.strip().splitlines()[-1])
        report(args, results)
        return
    model, tokenizer = load_model(args.model, device="cpu", dtype="bfloat16", progress=False)
    print(measure(ModelHandle(model, tokenizer), args.setting, args.length, args.repeats))


def report(args: argparse.Namespace, results: dict[str, float]) -> None:
    text = (f"{args.model}, bf16, {args.threads} torch thread(s), {platform.machine()}, "
            f"{torch.__version__}, caches of {args.length} tokens, {os.cpu_count()} CPUs\n\n"
            f"{table(results)}\n")
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"omp_threads-{args.threads}"
        stem.with_suffix(".md").write_text(text)
        payload: dict[str, Any] = {"model": args.model, "threads": args.threads,
                                   "length": args.length, "seconds": results}
        stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
