"""`specguard calibrate`: fit the normaliser bounds on a slice kept apart from the evaluated one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from specguard_bench.common.engines import PairSettings, load_engine
from specguard_bench.common.methods import specguard_config
from specguard_bench.reasoning.problems import load_problems, messages_for
from specguard_core.config import NormBounds


@dataclass(frozen=True)
class CalibrateSettings(PairSettings):
    """`specguard calibrate`: fit NormBounds on `n` problems from `offset` (keep this slice
    disjoint from the evaluated one), with `preset` and `sets` as the SpecGuard config (the
    pair's fields are keyword-only)."""

    out: Path
    dataset: str = "gsm8k"
    n: int = 20
    offset: int = 500
    seed: int = 0
    preset: str = "fast"
    max_new_tokens: int = 700
    low_q: float = 1.0
    high_q: float = 99.0


def run_calibrate(settings: CalibrateSettings, engine: Any = None) -> NormBounds:
    """Fit the normaliser bounds with `engine.calibrate` on the selected problems and save them
    to `settings.out` (NormBounds.save). Every draft step is accepted; the target
    runs only to score the steps when the config says `experimental={"scoring_model": "target"}`."""
    problems = load_problems(settings.dataset, settings.n, settings.offset)
    engine = engine or load_engine(settings)
    config = specguard_config(
        engine.config,
        f"specguard-{settings.preset}",
        settings.sets,
        max_new_tokens=settings.max_new_tokens,
    )
    prompts = [messages_for(p.question) for p in problems]
    # engine.calibrate iterates its prompts once, so a tqdm wrapper shows per-problem progress
    bar = tqdm(prompts, desc="calibrate", unit="problem", disable=not settings.progress)
    bounds: NormBounds = engine.calibrate(
        bar,
        low_q=settings.low_q,
        high_q=settings.high_q,
        config=config.merged(seed=settings.seed),
    )
    settings.out.parent.mkdir(parents=True, exist_ok=True)
    bounds.save(settings.out)
    return bounds
