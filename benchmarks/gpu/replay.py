"""A recorded run's latency, replayed with measured forward costs.

Each stored step (`ProblemRow.step_trace`) says how many tokens it committed, how many the draft
wrote and wasted, how many target passes it took and by which path; the replay charges the draft
the proposal loop's cost per token it generated and the target its passes (a decode step of
`fallback_k` rows when the target wrote the step by sampling, else a pass over the tokens it fed),
at the context the step started from. Costs are interpolated between the measured contexts, rows
and pass lengths (linear; extrapolated beyond the largest, held below the smallest).

Approximations (the `--check-against` calibration measures what they cost): a k-row proposal runs
as long as its mean candidate (`draft_wasted` spreads over the rows); a pass feeds the step's tokens
plus the draft tokens it rejected, evenly over the step's passes; per-step host work other than the
proposal loop (scoring, selection, text handling) is free. The token-SD baseline has no trace: its
tokens per target pass and draft tokens per pass are taken from the speculative-fallback steps of
the run's own SpecGuard rows (an estimate, reported as one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def interp(points: Mapping[float, float], x: float) -> float:
    """Piecewise-linear `points` at `x`: held below the smallest key, extrapolated (from the last
    two) above the largest; never below 0."""
    if not points:
        raise ValueError("no measured points to interpolate")
    xs = sorted(points)
    if len(xs) == 1 or x <= xs[0]:
        return points[xs[0]]
    i = next((j for j in range(1, len(xs)) if x <= xs[j]), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    y0, y1 = points[x0], points[x1]
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def _table(raw: Mapping[str, Mapping[str, float]] | None) -> dict[float, dict[float, float]]:
    return {float(c): {float(n): float(s) for n, s in row.items()}
            for c, row in (raw or {}).items() if row}


def _lookup(table: dict[float, dict[float, float]], ctx: float, n: float) -> float:
    return interp({c: interp(row, n) for c, row in table.items()}, ctx)


class ModelCosts:
    """One model's costs from its `costs.json` entry. `mode` "eager" uses the eager tables;
    "static" the StaticCache (compiled) ones where measured, scaled from the eager ones elsewhere
    (rows and pass lengths it did not measure); the proposal loop keeps its eager host overhead."""

    def __init__(self, entry: Mapping[str, Any], mode: str = "eager") -> None:
        if mode not in ("eager", "static"):
            raise ValueError(f"mode must be eager or static, got {mode!r}")
        eager = entry.get("eager")
        if not eager or not eager.get("decode"):
            raise ValueError("this model has no eager decode costs (was it skipped for time?)")
        self.decode_t, self.pass_t = _table(eager["decode"]), _table(eager.get("pass"))
        self.propose_t = _table(eager.get("propose_per_token"))
        self.prefill_p = {float(p): float(s) for p, s in (eager.get("prefill") or {}).items()}
        static = entry.get("static") or {}
        self.static_decode = _table(static.get("decode")) if mode == "static" else {}
        self.static_pass = _table(static.get("pass")) if mode == "static" else {}
        if mode == "static" and not self.static_decode:
            raise ValueError("this model has no static-cache decode costs; project with "
                             "--mode eager or measure with --compile")

    def _eager_decode(self, ctx: float, rows: float) -> float:
        return _lookup(self.decode_t, ctx, rows)

    def _eager_pass(self, ctx: float, tokens: float) -> float:
        if tokens <= 1 or not self.pass_t:
            return self._eager_decode(ctx, 1) * max(1.0, tokens)
        # between a decode (1 token) and the shortest measured pass, as one line
        table = {c: {1.0: self._eager_decode(c, 1), **row} for c, row in self.pass_t.items()}
        return _lookup(table, ctx, tokens)

    def decode(self, ctx: float, rows: float = 1) -> float:
        """One decode step of `rows` rows after `ctx` tokens."""
        eager = self._eager_decode(ctx, rows)
        if not self.static_decode:
            return eager
        return _lookup(self.static_decode, ctx, 1) * eager / max(1e-12, self._eager_decode(ctx, 1))

    def pass_(self, ctx: float, tokens: float) -> float:
        """One pass over `tokens` new tokens (one row, all logits) after `ctx` tokens."""
        eager = self._eager_pass(ctx, tokens)
        if not self.static_decode:
            return eager
        if not self.static_pass:
            return eager * self.decode(ctx, 1) / max(1e-12, self._eager_decode(ctx, 1))
        ref = min({n for row in self.static_pass.values() for n in row}, key=lambda n: abs(n - tokens))
        return eager * _lookup(self.static_pass, ctx, ref) / max(1e-12, self._eager_pass(ctx, ref))

    def prefill(self, tokens: float) -> float:
        """A prompt prefill of `tokens` tokens (a pass at the smallest context when unmeasured)."""
        if self.prefill_p:
            return interp(self.prefill_p, tokens)
        return self.pass_(min(self.decode_t), tokens)

    def propose(self, ctx: float, rows: float = 1) -> float:
        """The proposal loop's seconds per token for `rows` rows (a decode step when unmeasured)."""
        decode = self.decode(ctx, rows)
        if not self.propose_t:
            return decode
        return decode + max(0.0, _lookup(self.propose_t, ctx, rows) - self._eager_decode(ctx, rows))


@dataclass
class MethodSettings:
    """What the replay needs of a method's config: the fallback and its rows (from run.json)."""

    fallback: str = "speculative"
    fallback_k: int = 1


@dataclass
class SDRates:
    """Token-level SD as the run's speculative-fallback steps did it: per target pass."""

    tokens_per_pass: float
    draft_per_pass: float


def sd_rates(rows: Iterable[Mapping[str, Any]]) -> SDRates | None:
    """Tokens committed and draft tokens generated per target pass over the one-row
    speculative-fallback steps of `rows` (None when there are none)."""
    tokens = drafted = passes = 0
    for row in rows:
        for s in row.get("step_trace") or ():
            if s["path"] == "target-verified" and s["n_candidates"] == 1 and s["target_passes"]:
                tokens += s["tokens"]
                drafted += s["draft_written"] + s["draft_wasted"]
                passes += s["target_passes"]
    return SDRates(tokens / passes, drafted / passes) if passes else None


def replay_baseline(row: Mapping[str, Any], model: ModelCosts) -> dict[str, float]:
    """A plain greedy run of one model: the prompt prefill, then one decode per further token."""
    p, n = int(row["prompt_tokens"]), int(row["new_tokens"])
    return dict(prefill=model.prefill(p), decode=sum(model.decode(p + i) for i in range(1, n)))


def replay_token_sd(row: Mapping[str, Any], draft: ModelCosts, target: ModelCosts,
                    rates: SDRates) -> dict[str, float]:
    """Token-level SD at the given rates, at the run's middle context."""
    p, n = int(row["prompt_tokens"]), int(row["new_tokens"])
    passes, ctx = n / rates.tokens_per_pass, p + n / 2
    return dict(prefill=target.prefill(p) + draft.prefill(p),
                draft=passes * rates.draft_per_pass * draft.decode(ctx),
                target=passes * target.pass_(ctx, rates.draft_per_pass + 1))


def replay_specguard(row: Mapping[str, Any], draft: ModelCosts, target: ModelCosts,
                     settings: MethodSettings) -> dict[str, float]:
    """A SpecGuard row from its step trace (see the module docstring)."""
    p = int(row["prompt_tokens"])
    out = dict(prefill=draft.prefill(p), draft=0.0, draft_catch_up=0.0, target=0.0)
    done, target_pending, draft_pending, target_started = 0, 0, 0, False
    for s in row["step_trace"]:
        k, ctx, passes = max(1, int(s["n_candidates"])), p + done, int(s["target_passes"])
        if draft_pending:  # the target's regenerated step, caught up in one pass
            out["draft_catch_up"] += draft.pass_(ctx, draft_pending)
            draft_pending = 0
        generated = s["draft_written"] + s["draft_wasted"]
        if k == 1:
            out["draft"] += generated * draft.propose(ctx, 1)
        else:
            loop = max(0, s["draft_written"] - s["verified_prefix"]) + max(0, passes - 1) \
                if s["path"] == "target-verified" else 0  # the fallback's one-row draft runs
            out["draft"] += max(0, generated - loop) / k * draft.propose(ctx, k) + \
                loop * draft.propose(ctx, 1)
        if passes:
            if not target_started:
                out["prefill"] += target.prefill(p)
                target_started = True
            if s["path"] == "regenerated":
                rows = settings.fallback_k if settings.fallback == "sample" else 1
                catch_up = 1 if target_pending else 0
                out["target"] += catch_up * target.pass_(ctx, target_pending) + \
                    (passes - catch_up) * target.decode(ctx, rows)
                draft_pending += s["target_written"]
            else:
                rejected = s["draft_wasted"] if k == 1 else passes
                fed = target_pending + s["tokens"] + rejected
                out["target"] += passes * target.pass_(ctx, fed / passes)
            target_pending = 0
        else:
            target_pending += s["tokens"]
        done += s["tokens"]
    return out
