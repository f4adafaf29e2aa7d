"""What one model's forwards cost, on the engine's own paths.

Eager: through `ModelHandle` (the engine's DynamicCache path): one decode step of `rows` cache rows
(a proposal's forked rows) at each context; a verification pass over T tokens (all logits, as
`try_tokens` asks) at each context; a prompt prefill of P tokens; and the draft's proposal loop
(`engine.proposer.propose`, sampling and the host transfer of every token included) per token,
greedy for one row, sampled with attention capture for several (see `propose_per_token`).

Compiled: a `StaticCache` sized to the largest context and `torch.compile(mode="reduce-overhead")`
(CUDA graphs) of the model's forward: one decode step (one row) at each context, and passes over the
`compiled_pass_tokens`. Every compiled item is guarded: a failure is recorded, not raised.
"""

from __future__ import annotations

import copy
import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.gpu.models import StubTokenizer
from benchmarks.gpu.timing import Timer
from specguard_core.cache.capture import last_layers
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState
from specguard_core.decoding.proposal import SampleSpec
from specguard_core.engine.proposer import propose
from specguard_core.text.steps import StepRules

Table = dict[str, dict[str, float]]  # context -> (rows or tokens) -> seconds


@dataclass
class Grid:
    """The shapes to measure (see the module docstring)."""

    contexts: list[int]
    rows: list[int] = field(default_factory=lambda: [1, 4, 16])
    pass_tokens: list[int] = field(default_factory=lambda: [8, 16, 32, 64])
    prefill: list[int] = field(default_factory=lambda: [128, 512])
    propose_rows: list[int] = field(default_factory=lambda: [1, 16])
    propose_tokens: int = 16
    compiled_pass_tokens: list[int] = field(default_factory=lambda: [16])

    def fitting(self, max_positions: int) -> tuple[list[int], list[int]]:
        """(contexts that fit the model's position limit with the longest pass after them, those
        that do not)."""
        room = max(self.pass_tokens + [self.propose_tokens]) + 1
        fit = [c for c in self.contexts if not max_positions or c + room <= max_positions]
        return fit, [c for c in self.contexts if c not in fit]


class Deadline:
    """The measurement's time budget: `left()` seconds remain; `over` once it is spent."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    @property
    def over(self) -> bool:
        return self.left() <= 0


def _ids(n: int, vocab: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=gen).tolist()


class EagerBench:
    """The eager measurements of one model through the engine's `ModelHandle`."""

    def __init__(self, model: Any, timer: Timer, grid: Grid, deadline: Deadline) -> None:
        self.handle = ModelHandle(model, StubTokenizer(), name="bench")
        self.vocab = int(model.config.get_text_config().vocab_size)
        self.timer, self.grid, self.deadline = timer, grid, deadline
        self.device = self.handle.device

    def context(self, ctx: int) -> CacheState:
        """A state holding `ctx` random tokens (with its next-token logits)."""
        state = self.handle.new_state()
        self.handle.extend(state, _ids(ctx, self.vocab, seed=ctx))
        return state

    def _reset(self, state: CacheState, ctx: int) -> Callable[[], None]:
        return lambda: self.handle.rollback(state, ctx)

    def decode(self, base: CacheState, ctx: int, rows: int) -> float:
        state = copy.deepcopy(base)
        self.handle.fork(state, rows)
        feed = torch.randint(3, self.vocab, (rows, 1), device=self.device)  # sampled on device
        return self.timer.median(lambda: self.handle.forward(state, feed), self._reset(state, ctx))

    def verify(self, base: CacheState, ctx: int, tokens: int) -> float:
        ids = _ids(tokens, self.vocab, seed=tokens)
        return self.timer.median(  # a list of ids from the host, as `try_tokens` gets them
            lambda: self.handle.forward(base, torch.tensor([ids]), all_logits=True, tentative=True),
            self._reset(base, ctx))

    def prefill(self, tokens: int) -> float:
        ids = _ids(tokens, self.vocab, seed=7)
        holder = [self.handle.new_state()]

        def reset() -> None:
            holder[0] = self.handle.new_state()

        return self.timer.median(lambda: self.handle.extend(holder[0], ids), reset)

    def propose_per_token(self, base: CacheState, rows: int) -> float:
        """Seconds per token of the proposal loop: greedy for one row (the balanced and fast
        presets), else as the paper preset proposes: sampling at temperature 0.7 / top-p 0.8 with
        the attention rows of the last 3 layers captured (its grounding signal)."""
        greedy = rows == 1
        layers = None if greedy else last_layers(self.handle.model, 3)
        spec = SampleSpec(rows, 0.0 if greedy else 0.7, 1.0 if greedy else 0.8,
                          self.grid.propose_tokens, StepRules(), capture_layers=layers)
        gen = torch.Generator(self.device).manual_seed(0)
        seconds = self.timer.median(lambda: propose(self.handle, base, spec, gen).discard(),
                                    repeats=max(1, self.timer.repeats // 2))
        return seconds / self.grid.propose_tokens

    def item(self, kind: str, base: CacheState, ctx: int, n: int) -> float:
        if kind == "decode":
            return self.decode(base, ctx, n)
        if kind == "pass":
            return self.verify(base, ctx, n)
        return self.propose_per_token(base, n)

    def run(self, contexts: list[int]) -> tuple[dict[str, Any], list[str]]:
        """All eager items over `contexts`; (results, items skipped for the time budget)."""
        g, skipped = self.grid, []
        out: dict[str, Any] = {"decode": {}, "pass": {}, "prefill": {}, "propose_per_token": {}}
        for p in g.prefill:
            if self.deadline.over:
                skipped.append(f"prefill {p}")
                continue
            out["prefill"][str(p)] = self.prefill(p)
        for ctx in contexts:
            base = self.context(ctx)
            for kind, sizes in (("decode", g.rows), ("pass", g.pass_tokens),
                                ("propose_per_token", g.propose_rows)):
                for n in sizes:
                    if self.deadline.over:
                        skipped.append(f"{kind} ctx={ctx} n={n}")
                        continue
                    out[kind].setdefault(str(ctx), {})[str(n)] = self.item(kind, base, ctx, n)
            del base
        return out, skipped


def _seek(cache: Any, position: int) -> None:
    """Make a StaticCache write its next tokens at `position`: layers that count their length
    (transformers >= 5.2x) are set back to it; older ones take the `cache_position` passed."""
    for layer in getattr(cache, "layers", ()):
        length = getattr(layer, "cumulative_length", None)
        if isinstance(length, torch.Tensor):
            length.fill_(position)


def compiled_costs(model: Any, timer: Timer, grid: Grid, contexts: list[int], deadline: Deadline,
                   compile_model: bool) -> dict[str, Any]:
    """Decode (one row) and passes over a StaticCache, the forward compiled with CUDA graphs when
    `compile_model` (else the static cache alone, eager). Failures are recorded in "errors"."""
    from transformers import StaticCache

    vocab = int(model.config.get_text_config().vocab_size)
    dev = next(model.parameters()).device
    top = max(contexts)
    max_len = top + max(grid.compiled_pass_tokens + [1]) + 8
    out: dict[str, Any] = {"max_cache_len": max_len, "compiled": compile_model, "decode": {},
                           "pass": {}, "compile_s": {}, "errors": {}, "skipped": []}
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"  # as `ModelHandle` names it (transformers >= 5.24: `cache`)
    try:
        model.set_attn_implementation("sdpa")
        cache = StaticCache(config=model.config, max_cache_len=max_len)
        with torch.inference_mode():
            model(input_ids=torch.tensor([_ids(top, vocab, seed=top)], device=dev),
                  use_cache=True, cache_position=torch.arange(top, device=dev), logits_to_keep=1,
                  **{cache_arg: cache})
        step = torch.compile(model.forward, mode="reduce-overhead") if compile_model \
            else model.forward
    except Exception as err:  # noqa: BLE001 - recorded: the eager costs stand without it
        out["errors"]["setup"] = f"{type(err).__name__}: {err}"[:500]
        return out

    def call(ids: torch.Tensor, start: int) -> None:
        _seek(cache, start)  # untimed in effect: a few in-place fills, no host sync
        pos = torch.arange(start, start + ids.shape[1], device=dev)
        with torch.inference_mode():
            step(input_ids=ids, position_ids=pos[None], cache_position=pos, use_cache=True,
                 logits_to_keep=ids.shape[1], **{cache_arg: cache})

    items = [("decode", ctx, 1) for ctx in contexts] + \
        [("pass", ctx, t) for t in grid.compiled_pass_tokens for ctx in contexts]
    for kind, ctx, n in items:
        key = f"{kind} ctx={ctx} n={n}"
        if deadline.over:
            out["skipped"].append(key)
            continue
        run = functools.partial(call, torch.randint(3, vocab, (1, n), device=dev), ctx)
        try:
            out["compile_s"][key] = timer.once(run)  # the first call compiles a new shape
            out[kind].setdefault(str(ctx), {})[str(n)] = timer.median(run)
        except Exception as err:  # noqa: BLE001 - recorded, the next item still runs
            out["errors"][key] = f"{type(err).__name__}: {err}"[:500]
    return out
