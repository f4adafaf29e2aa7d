"""Cost of one batched forward over N requests' caches vs N solo forwards (layer 1).

For the draft and the target of the default pair: a 1-token decode of one request; one batched
decode of N requests (`engine.batch.extend_rows`, prefixes of different lengths); the same N
requests decoded one after another; and an 8-token verification pass (`try_rows` vs `try_tokens`).
The gather (copying the N caches into one left-padded cache) and scatter (appending each row's new
positions to its own cache) are also timed alone. Every timing is repeated and the median kept.

`--padding` measures what left padding costs, i.e. the most a packed or paged layout (no pads)
could save: the batched decode over prefixes of different lengths (caches padded to the longest)
against the same decode over equal prefixes of their mean length (the same real positions, no
cache pads); and a batched verification of rows with different numbers of new tokens (right-padded
to the longest) against rows of equal length with the same real tokens.

    taskset -c 1 env OMP_NUM_THREADS=1 python benchmarks/batch_forward.py

Prints a table and writes JSON under benchmarks/results/batch-forward-cpu1core/.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState
from specguard_core.concurrency.padded import extend_rows, try_rows
from specguard_core.models.loading import load_model
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, resolve

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "batch-forward-cpu1core"


def _median_time(fn: Callable[[], Any], reset: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        reset()
    return statistics.median(times)


def _prefix_states(handle: ModelHandle, text_ids: list[int], lengths: list[int]) -> list[CacheState]:
    """One real prefill of the longest prefix; each request's state is a copy cropped to its
    length (real keys/values of real text, different lengths)."""
    base = handle.new_state()
    handle.extend(base, text_ids[:max(lengths)])
    states = []
    for n in lengths:
        state = copy.deepcopy(base)
        handle.rollback(state, n)
        handle.next_logits(state)  # re-feeds the last token: real next-token logits
        states.append(state)
    return states


def _reset(handle: ModelHandle, states: list[CacheState], lengths: list[int]) -> Callable[[], None]:
    """Back to each request's prefix, with its next-token logits (so no pass re-feeds a token)."""
    saved = [s.logits for s in states]

    def reset() -> None:
        for state, n, logits in zip(states, lengths, saved, strict=True):
            handle.rollback(state, n)
            state.logits, state.pending = logits, []
    return reset


def measure(ref: str, text_ids: list[int], lengths: list[int], batch_sizes: list[int],
            verify_sizes: list[int], verify_tokens: int, repeats: int,
            padding: bool = False) -> dict[str, Any]:
    model, tok = load_model(ref, device="cpu", dtype="bfloat16", progress=False)
    handle = ModelHandle(model, tok)
    t0 = time.perf_counter()
    states = _prefix_states(handle, text_ids, lengths)
    setup_s = time.perf_counter() - t0
    reset = _reset(handle, states, lengths)
    nxt = text_ids[max(lengths)]  # the token after the longest prefix: a real id
    draft_ids = text_ids[max(lengths) + 1:max(lengths) + 1 + verify_tokens]
    rows: list[dict[str, Any]] = []

    def solo_decode(group: list[CacheState]) -> Callable[[], None]:
        def run() -> None:
            for s in group:
                handle.extend(s, [nxt])
        return run

    def solo_verify(group: list[CacheState]) -> Callable[[], None]:
        def run() -> None:
            for s in group:
                handle.try_tokens(s, draft_ids)
        return run

    def gather_scatter(group: list[CacheState], q: int) -> tuple[float, float]:
        gather = _median_time(lambda: handle.gather_rows(group), reset, repeats)
        batched = handle.gather_rows(group)
        width = batched.get_seq_length()
        scatter = _median_time(lambda: handle.scatter_rows(batched, group, width - q, [q] * len(group)),
                               reset, repeats)
        return gather, scatter

    one = _median_time(solo_decode(states[:1]), reset, repeats)
    for n in batch_sizes:
        group = states[:n]
        batched = _median_time(functools.partial(extend_rows, handle, group, [[nxt]] * n),
                               reset, repeats)
        serial = _median_time(solo_decode(group), reset, repeats)
        gather, scatter = gather_scatter(group, 1)
        rows.append(dict(pass_="decode 1 tok", n=n, solo_one_s=one, batched_s=batched,
                         serial_s=serial, gather_s=gather, scatter_s=scatter,
                         ratio_batched_vs_n_solo=batched / (n * one),
                         ratio_batched_vs_serial=batched / serial))
    one_v = _median_time(solo_verify(states[:1]), reset, repeats)
    for n in verify_sizes:
        group = states[:n]
        batched = _median_time(functools.partial(try_rows, handle, group, [draft_ids] * n),
                               reset, repeats)
        serial = _median_time(solo_verify(group), reset, repeats)
        gather, scatter = gather_scatter(group, verify_tokens)
        rows.append(dict(pass_=f"verify {verify_tokens} tok", n=n, solo_one_s=one_v,
                         batched_s=batched, serial_s=serial, gather_s=gather, scatter_s=scatter,
                         ratio_batched_vs_n_solo=batched / (n * one_v),
                         ratio_batched_vs_serial=batched / serial))
    # agreement of the batched and solo logits in bf16 (information, not a test)
    n = max(batch_sizes)
    solo_logits = []
    for s in states[:n]:
        handle.extend(s, [nxt])
        assert s.logits is not None
        solo_logits.append(s.logits)
    reset()
    got = extend_rows(handle, states[:n], [[nxt]] * n)
    reset()
    diff = max(float((g - e).abs().max()) for g, e in zip(got, solo_logits, strict=True) if g is not None)
    same = sum(int(g is not None and int(g.argmax()) == int(e.argmax()))
               for g, e in zip(got, solo_logits, strict=True))
    out = dict(model=ref, setup_s=setup_s, rows=rows,
               bf16_max_abs_logit_diff=diff, bf16_argmax_agree=f"{same}/{n}")
    if padding:
        out["padding"] = measure_padding(handle, text_ids, lengths[:n], repeats)
    return out


def measure_padding(handle: ModelHandle, text_ids: list[int], lengths: list[int], repeats: int
                    ) -> list[dict[str, Any]]:
    """Padded (mixed lengths) vs unpadded (equal lengths, the same real positions) batched
    forwards; the ratio bounds what a packed layout could save on this machine."""
    n = len(lengths)
    mean = round(sum(lengths) / n)
    mixed = _prefix_states(handle, text_ids, lengths)
    equal = _prefix_states(handle, text_ids, [mean] * n)
    nxt = text_ids[max(lengths)]
    base = max(lengths) + 1
    rows = []
    dec_mixed = _median_time(functools.partial(extend_rows, handle, mixed, [[nxt]] * n),
                             _reset(handle, mixed, lengths), repeats)
    dec_equal = _median_time(functools.partial(extend_rows, handle, equal, [[nxt]] * n),
                             _reset(handle, equal, [mean] * n), repeats)
    rows.append(dict(pass_="decode 1 tok", n=n, padded=f"caches {min(lengths)}-{max(lengths)}",
                     unpadded=f"caches {mean} each", padded_s=dec_mixed, unpadded_s=dec_equal,
                     ratio=dec_mixed / dec_equal))
    widths = [2 + (14 * i) // max(1, n - 1) for i in range(n)]  # 2 .. 16 new tokens per row
    even = round(sum(widths) / n)
    ver_mixed = _median_time(functools.partial(
        try_rows, handle, equal, [text_ids[base:base + w] for w in widths]),
        _reset(handle, equal, [mean] * n), repeats)
    ver_equal = _median_time(functools.partial(
        try_rows, handle, equal, [text_ids[base:base + even]] * n),
        _reset(handle, equal, [mean] * n), repeats)
    rows.append(dict(pass_="verify", n=n, padded=f"{min(widths)}-{max(widths)} new tokens",
                     unpadded=f"{even} new tokens each", padded_s=ver_mixed, unpadded_s=ver_equal,
                     ratio=ver_mixed / ver_equal))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=[DEFAULT_DRAFT, DEFAULT_TARGET])
    ap.add_argument("--lengths", type=int, nargs="+",
                    default=[150, 186, 221, 257, 293, 329, 364, 400],
                    help="cached prefix length of each request (the first N are used)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--verify-sizes", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--verify-tokens", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--padding", action="store_true",
                    help="also measure what left padding costs (see the module docstring)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if max(args.batch_sizes + args.verify_sizes) > len(args.lengths):
        ap.error("give at least as many --lengths as the largest batch size")
    torch.set_num_threads(args.threads)
    text = (ROOT / "README.md").read_text()
    tok = AutoTokenizer.from_pretrained(resolve(args.models[0]))
    text_ids = list(tok(text, add_special_tokens=False)["input_ids"])
    if len(text_ids) < max(args.lengths) + 1 + args.verify_tokens:
        ap.error("README.md is too short for the longest prefix")
    results = [measure(ref, text_ids, args.lengths, args.batch_sizes, args.verify_sizes,
                       args.verify_tokens, args.repeats, args.padding) for ref in args.models]
    machine = dict(cpu=_cpu_name(), cores_allowed=sorted(os.sched_getaffinity(0)),
                   torch_threads=torch.get_num_threads(), torch=torch.__version__,
                   python=platform.python_version(), dtype="bfloat16", repeats=args.repeats,
                   note="median of repeats; the core is shared with other work, so timings are noisy")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batch_forward.json").write_text(
        json.dumps(dict(machine=machine, lengths=args.lengths, results=results), indent=2) + "\n")
    print(f"{machine['cpu']}, cores {machine['cores_allowed']}, {machine['torch_threads']} thread(s)")
    print(f"{'model':<34} {'pass':<13} {'N':>2} {'1 solo s':>9} {'batched s':>9} {'N solo s':>9}"
          f" {'gather s':>8} {'scatter s':>9} {'b/(N*1)':>8} {'b/serial':>8}")
    for res in results:
        for r in res["rows"]:
            print(f"{res['model']:<34} {r['pass_']:<13} {r['n']:>2} {r['solo_one_s']:>9.3f} "
                  f"{r['batched_s']:>9.3f} {r['serial_s']:>9.3f} {r['gather_s']:>8.4f} "
                  f"{r['scatter_s']:>9.4f} {r['ratio_batched_vs_n_solo']:>8.2f} "
                  f"{r['ratio_batched_vs_serial']:>8.2f}")
        print(f"{res['model']}: bf16 batched vs solo logits, max abs diff "
              f"{res['bf16_max_abs_logit_diff']:.3g}, argmax agree {res['bf16_argmax_agree']}")
        for r in res.get("padding", []):
            print(f"{res['model']}: padding, {r['pass_']}, N={r['n']}: {r['padded']} "
                  f"{r['padded_s']:.3f} s vs {r['unpadded']} {r['unpadded_s']:.3f} s: "
                  f"{r['ratio']:.2f}x")
    print(f"wrote {args.out / 'batch_forward.json'}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
