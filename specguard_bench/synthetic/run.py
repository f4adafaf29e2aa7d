"""Synthetic mode: timing with random-weight models of real architectures, no weights needed.

What it measures (one report, `synthetic.json` / `synthetic.md` / `synthetic.png`):

- target-only and draft-only latency (greedy `generate`) for the same number of new tokens;
- SpecGuard latency at forced acceptance rates (default 50/70/90%), against target-only and
  against the ideal (`common.rows.ideal_latency`), with the acceptance actually achieved;
- the per-step cost of k (default 1/4/16 candidates) with every step accepted;
- the cost of attention capture for grounding: propose time per step with capture off (`beta=1`,
  where grounding has no weight and the engine captures nothing) and with 1, 3 and all layers
  captured (`grounding_layers`).

How the runs are made comparable:

- Fixed step length: the step delimiter is a string no token decodes to (`NEVER_DELIMITER`), so
  every step is exactly `max_step_tokens` long; end-of-sequence and other special tokens are
  masked out of the logits (a forward hook on `lm_head`), so every run has exactly
  `steps * max_step_tokens` new tokens, for SpecGuard and for the baselines alike.
- Forced acceptance: a calibration pass fits NormBounds (`engine.calibrate`), a second pass with
  every step accepted collects the draft's step scores, and tau for rate a is their (1 - a)
  quantile; the achieved rate on the measured prompts is reported next to the requested one.

Sizes: `tiny` (tests), `small` (CPU default, float32), `real` (Qwen2.5-0.5B draft and Qwen2.5-7B
target shapes, bfloat16, meant for a GPU).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from specguard_bench.synthetic.measure import (
    baseline_latency,
    run_specguard,
    step_scores,
    tau_for_rate,
)
from specguard_bench.synthetic.models import (
    NEVER_DELIMITER,
    SIZES,
    SPECIAL_TOKENS,
    SizeSpec,
    random_model,
    synthetic_prompts,
    word_tokenizer,
)
from specguard_bench.synthetic.report import write_synthetic
from specguard_core.config import NormBounds, SpecGuardConfig, preset
from specguard_core.models.loading import resolve_device


@dataclass(frozen=True)
class SyntheticSettings:
    """Options of `specguard bench --synthetic`. `sets` are SpecGuardConfig overrides on top of
    `preset` (e.g. `max_step_tokens`); `step_tokens`/`steps` default to the size's values."""

    out_dir: Path
    size: str = "small"
    device: str = "auto"
    dtype: str | None = None
    preset: str = "fast"
    sets: Mapping[str, Any] = field(default_factory=dict)
    rates: tuple[float, ...] = (0.5, 0.7, 0.9)
    ks: tuple[int, ...] = (1, 4, 16)
    n_prompts: int = 3
    calib_prompts: int = 2
    seed: int = 0
    progress: bool = True


def build_engine(settings: SyntheticSettings) -> tuple[Any, SizeSpec, SpecGuardConfig, str]:
    """The random pair as a SpecGuardEngine, the size spec, the base config and the device."""
    from specguard_core import SpecGuardEngine

    spec = SIZES[settings.size]
    device = resolve_device(settings.device)
    dtype = getattr(torch, settings.dtype or spec.dtype)
    tok = word_tokenizer(max(spec.draft.vocab_size, spec.target.vocab_size))
    draft = random_model(spec.draft, tok, dtype, device, settings.seed + 1)
    target = random_model(spec.target, tok, dtype, device, settings.seed + 2)
    sets = dict(settings.sets)
    step_tokens = int(sets.pop("max_step_tokens", spec.step_tokens))
    steps = int(sets.pop("max_steps", spec.steps))
    config = preset(
        settings.preset,
        step_delimiters=(NEVER_DELIMITER,),
        max_step_tokens=step_tokens,
        max_steps=steps,
        max_new_tokens=step_tokens * steps,
        **sets,
    )
    engine = SpecGuardEngine(
        draft, tok, target, tok, config=config, name=f"synthetic-{settings.size}"
    )
    return engine, spec, config, device


def _rate_rows(
    engine: Any,
    prompts: Sequence[str],
    config: SpecGuardConfig,
    scores: Sequence[float],
    settings: SyntheticSettings,
    device: str,
    target_s: float,
) -> list[dict[str, Any]]:
    rows = []
    for rate in settings.rates:
        tau = tau_for_rate(scores, rate)
        summ = run_specguard(
            engine, prompts, config.merged(tau=tau), device, settings.seed
        ).summary()
        rows.append(
            {
                "requested": rate,
                "tau": tau,
                **summ,
                "speedup_vs_target": target_s / summ["latency_s"],
                "measured_over_ideal": summ["latency_s"] / summ["ideal_latency_s"]
                if summ["ideal_latency_s"] > 0
                else None,
            }
        )
    return rows


def _k_rows(
    engine: Any,
    prompts: Sequence[str],
    config: SpecGuardConfig,
    settings: SyntheticSettings,
    device: str,
) -> list[dict[str, Any]]:
    rows = []
    for k in settings.ks:
        cfg = config.merged(k=k, tau=-math.inf)
        rows.append(
            {"k": k, **run_specguard(engine, prompts, cfg, device, settings.seed).summary()}
        )
    return rows


def _capture_rows(
    engine: Any,
    prompts: Sequence[str],
    config: SpecGuardConfig,
    n_layers: int,
    settings: SyntheticSettings,
    device: str,
) -> dict[str, Any]:
    """Propose time per step, every step accepted, with capture off (`beta=1`: grounding has no
    weight, so no attention is captured) and with the last 1, `grounding_layers` and all layers
    captured."""
    used = min(config.experimental.grounding_layers, n_layers)
    sweep = []
    for layers in [0, *sorted({1, used, n_layers})]:
        change = {"beta": 1.0} if layers == 0 else {"experimental": {"grounding_layers": layers}}
        cfg = config.merged(tau=-math.inf, **change)
        summ = run_specguard(engine, prompts, cfg, device, settings.seed).summary()
        sweep.append(
            {
                "grounding_layers": layers,
                "propose_per_step_s": summ["per_step_s"].get("propose", 0.0),
                "score_per_step_s": summ["per_step_s"].get("score", 0.0),
            }
        )
    off = sweep[0]["propose_per_step_s"]
    on = next(r["propose_per_step_s"] for r in sweep if r["grounding_layers"] == used)
    return {
        "layers_sweep": sweep,
        "default_layers": used,
        "capture_share_of_propose": (on - off) / on if on > 0 else None,
    }


def run_synthetic(settings: SyntheticSettings) -> dict[str, Any]:
    """Build the random pair, measure, write `synthetic.json/.md/.png` to `settings.out_dir`, and
    return the report dict (see the module docstring for what is measured)."""
    if settings.size not in SIZES:
        raise ValueError(f"unknown size {settings.size!r}; choose one of {sorted(SIZES)}")
    engine, spec, config, device = build_engine(settings)
    new_tokens = config.max_new_tokens
    if new_tokens is None:  # build_engine sets it: max_step_tokens x max_steps
        raise ValueError("the synthetic run needs a token budget")
    vocab_words = min(spec.draft.vocab_size, spec.target.vocab_size) - len(SPECIAL_TOKENS)
    prompts = synthetic_prompts(settings.n_prompts, spec.prompt_words, vocab_words, settings.seed)
    calib = synthetic_prompts(
        settings.calib_prompts, spec.prompt_words, vocab_words, settings.seed + 7919
    )
    stages = tqdm(total=6, desc="synthetic", unit="stage", disable=not settings.progress)
    run_specguard(
        engine,
        prompts[:1],
        config.merged(max_new_tokens=config.max_step_tokens),
        device,
        settings.seed,
    )  # warm-up
    target_s = baseline_latency(engine, "target", prompts, new_tokens)
    draft_s = baseline_latency(engine, "draft", prompts, new_tokens)
    stages.update(2)
    bounds: NormBounds = engine.calibrate(calib, config=config)
    config = config.merged(bounds=bounds)
    scores = step_scores(engine, calib, config)
    stages.update(1)
    rates = _rate_rows(engine, prompts, config, scores, settings, device, target_s)
    stages.update(1)
    ks = _k_rows(engine, prompts, config, settings, device)
    stages.update(1)
    capture = _capture_rows(engine, prompts, config, spec.draft.num_hidden_layers, settings, device)
    stages.update(1)
    stages.close()
    report = {
        "size": settings.size,
        "device": device,
        "dtype": settings.dtype or spec.dtype,
        "preset": settings.preset,
        "k": config.k,
        "fallback": config.fallback,
        "draft_shape": asdict(spec.draft),
        "target_shape": asdict(spec.target),
        "draft_params": spec.draft.parameters(),
        "target_params": spec.target.parameters(),
        "step_tokens": config.max_step_tokens,
        "steps": config.max_steps,
        "new_tokens": new_tokens,
        "prompt_words": spec.prompt_words,
        "n_prompts": len(prompts),
        "bounds": bounds.model_dump(),
        "n_calibration_scores": len(scores),
        "target_latency_s": target_s,
        "draft_latency_s": draft_s,
        "acceptance": rates,
        "k_sweep": ks,
        "capture": capture,
        "config": config.model_dump(mode="json"),
    }
    write_synthetic(settings.out_dir, report)
    return report
