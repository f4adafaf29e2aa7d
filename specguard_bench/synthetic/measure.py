"""The synthetic mode's timing primitives: timed SpecGuard runs (`Runs`, `run_specguard`), the
baselines' latency for a fixed number of new tokens, and the threshold that forces an acceptance
rate (`step_scores`, `tau_for_rate`)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specguard_bench.common.methods import run_method
from specguard_bench.common.rows import ideal_latency
from specguard_core.config import SpecGuardConfig
from specguard_core.types import GenerationResult


@dataclass
class Runs:
    """Per-run measurements of one configuration."""

    latency: list[float] = field(default_factory=list)
    ideal: list[float] = field(default_factory=list)
    accepted: int = 0
    scored: int = 0
    steps: int = 0
    phase_s: dict[str, float] = field(default_factory=dict)

    def add(self, latency: float, res: GenerationResult) -> None:
        self.latency.append(latency)
        self.ideal.append(ideal_latency(res.steps))
        self.accepted += sum(s.accepted for s in res.steps)
        self.scored += sum(s.score is not None for s in res.steps)
        self.steps += len(res.steps)
        for step in res.steps:
            for phase, sec in step.phase_s.items():
                self.phase_s[phase] = self.phase_s.get(phase, 0.0) + sec

    def summary(self) -> dict[str, Any]:
        runs = max(1, len(self.latency))
        return {
            "latency_s": statistics.fmean(self.latency),
            "ideal_latency_s": statistics.fmean(self.ideal),
            "achieved": self.accepted / self.scored if self.scored else math.nan,
            "steps_per_run": self.steps / runs,
            "phase_s": {k: v / runs for k, v in sorted(self.phase_s.items())},
            "per_step_s": {k: v / max(1, self.steps) for k, v in sorted(self.phase_s.items())},
        }


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_specguard(
    engine: Any, prompts: Sequence[str], config: SpecGuardConfig, device: str, seed: int
) -> Runs:
    """Run the engine on each prompt with `config` (seeded per prompt), timing each run."""
    runs = Runs()
    for i, prompt in enumerate(prompts):
        t0 = time.perf_counter()
        res = engine.generate(prompt, config=config.merged(seed=seed + i))
        _sync(device)
        runs.add(time.perf_counter() - t0, res)
    return runs


def baseline_latency(engine: Any, method: str, prompts: Sequence[str], new_tokens: int) -> float:
    """Mean latency of greedy `generate` (`target` or `draft`) for exactly `new_tokens` tokens."""
    times = []
    for prompt in prompts:
        out = run_method(
            engine, method, [{"role": "user", "content": prompt}], max_new_tokens=new_tokens
        )
        if out.new_tokens != new_tokens:
            raise RuntimeError(f"{method} produced {out.new_tokens} tokens, expected {new_tokens}")
        times.append(out.latency_s)
    return statistics.fmean(times)


def step_scores(engine: Any, prompts: Sequence[str], config: SpecGuardConfig) -> list[float]:
    """The draft's step scores with every step accepted (tau = -inf)."""
    scores = []
    for i, prompt in enumerate(prompts):
        res = engine.generate(prompt, config=config.merged(tau=-math.inf, seed=10_000 + i))
        scores += [s.score for s in res.steps if s.score is not None]
    return scores


def tau_for_rate(scores: Sequence[float], rate: float) -> float:
    """The threshold that accepts a fraction `rate` of `scores` (accept iff score >= tau):
    the (1 - rate) quantile; -inf for rate 1, +inf for rate 0."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError("rate must be in [0, 1]")
    if rate >= 1.0:
        return -math.inf
    if rate <= 0.0 or not scores:
        return math.inf
    return float(np.quantile(np.asarray(scores, dtype=np.float64), 1.0 - rate, method="linear"))
