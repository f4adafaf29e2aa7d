"""What a target forward over a few new tokens costs on a CPU, against a one-token forward.

Speculative decoding pays when checking k tokens in one forward costs about one token's forward
(the weights are read once for all k). This measures it for a model of the default pair: a
forward of 1, 2, 3, 4, 8 and 16 new tokens after a 100-token context, the best of `--reps`, with
torch's `F.linear` and with every linear layer computed as `W @ x.T` (the form MKL runs faster
for a few rows on some CPUs), and the same two forms for the model's largest linear layers alone.

    taskset -c 1 .venv/bin/python benchmarks/small_forwards.py --dtype float32

Prints the figures; nothing is written.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from specguard_core.models.loading import load_model
from specguard_core.models.registry import DEFAULT_TARGET

ROWS = (1, 2, 3, 4, 8, 16)


def _transposed(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    out = (self.weight @ x.reshape(rows, x.shape[-1]).t()).t()  # [rows, out]
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], self.weight.shape[0])


def _best(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _forwards(model: Any, reps: int) -> list[float]:
    """Seconds of a forward of n new tokens after a 100-token context, for each n in ROWS."""
    with torch.no_grad():
        cache = model(torch.randint(100, 10000, (1, 100)), use_cache=True).past_key_values
        out = []
        for n in ROWS:
            ids = torch.randint(100, 10000, (1, n))

            def step(ids: torch.Tensor = ids, n: int = n) -> None:
                model(ids, past_key_values=cache, use_cache=True)
                cache.crop(-n)
            out.append(_best(step, reps))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_TARGET)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model, device="cpu", dtype=args.dtype, progress=False)
    model.eval()
    linears = sorted((m for m in model.modules() if type(m) is torch.nn.Linear),
                     key=lambda m: -m.weight.numel())
    shapes = {tuple(m.weight.shape): m for m in linears}  # one layer of each shape
    print(f"{args.model}, {args.dtype}, {args.threads} thread(s); seconds, best of {args.reps}")
    print("rows:             " + "".join(f"{n:>9}" for n in ROWS))
    for (out_f, in_f), layer in list(shapes.items())[:3]:
        with torch.no_grad():
            for name, fn in (("F.linear", lambda x, w=layer.weight: F.linear(x, w)),
                             ("W @ x.T", lambda x, w=layer.weight: (w @ x.t()).t())):
                inputs = [torch.randn(n, in_f) for n in ROWS]  # [rows, in]
                cells = [_best(partial(fn, x), args.reps * 3) for x in inputs]
                print(f"{out_f}x{in_f} {name:<8}" + "".join(f"{c * 1e3:8.1f}m" for c in cells))
    plain = _forwards(model, args.reps)
    for layer in linears:
        layer.forward = _transposed.__get__(layer)  # type: ignore[method-assign]
    transposed = _forwards(model, args.reps)
    for name, cells in (("model, F.linear", plain), ("model, W @ x.T", transposed)):
        print(f"{name:<17}" + "".join(f"{c:9.2f}" for c in cells))
    print("per token, F.linear: " + " ".join(f"{n}: {c / n / plain[0]:.2f}x"
                                             for n, c in zip(ROWS, plain, strict=True)))


if __name__ == "__main__":
    main()
