"""The named presets (`paper`, `balanced`, `fast`), the default one, and `preset()`."""

from __future__ import annotations

from typing import Any

from specguard_core.config.request import SpecGuardConfig

PRESETS: dict[str, dict[str, Any]] = {
    # the paper's settings (arXiv 2604.15244): k=16, T=0.7, top_p=0.8, beta=0.3, tau=0.7,
    # k-sample target fallback with the same selector
    "paper": dict(k=16, temperature=0.7, top_p=0.8, beta=0.3, tau=0.7, fallback="sample",
                  fallback_k=16, verifier="paper"),
    # the target checks every step (route "check") while the draft writes it, every 16 draft
    # tokens, so a refused step stops the draft early; one greedy draft candidate; refused steps
    # finished by the speculative fallback. The check is lossless (acceptance "exact": the
    # target's own tokens), so the answer is the target's greedy text: typical acceptance made
    # answers drift from the target's on unseen problems (longer plans, other numbers). The typical
    # values below (eps 0.03, delta 0.1, typical_ratio 0.3) apply with acceptance="typical", the
    # opt-in for users who accept that drift. Actions are the target's own (action_acceptance
    # "exact"). The fallback's draft runs end once the product of the draft's probabilities of the
    # run falls below 0.7; the check also runs early once that product for the tokens written
    # since the last check falls below 0.5 (check_run_below). Why each value: docs/decisions/.
    "balanced": dict(k=1, temperature=0.0, beta=1.0, route="check", acceptance="exact",
                     typical_ratio=0.3, typical_eps=0.03, typical_delta=0.1, check_run_below=0.5,
                     check_tokens=16, fallback="speculative", fallback_k=1, sd_run_confidence=0.7),
    # latency-first: draft steps the verifier is confident in are kept without the target (the
    # learned card's P(correct) >= 0.87, its 95%-precision threshold on human-labelled steps; where
    # no card ships for the draft, the paper's confidence-only r), the rest go through the
    # speculative fallback (never slower than the target writing the step)
    "fast": dict(k=1, temperature=0.0, beta=1.0, verifier="auto", tau=0.87, fallback="speculative",
                 fallback_k=1),
}


DEFAULT_PRESET = "balanced"  # what the engine, the CLI and the adapters run when given no config


def default_config() -> SpecGuardConfig:
    """The configuration used when none is given: the `balanced` preset."""
    return preset(DEFAULT_PRESET)


def preset(name: str, **overrides: Any) -> SpecGuardConfig:
    """The named preset (`paper`, `balanced` or `fast`) with overrides applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    base = SpecGuardConfig().merged(**PRESETS[name])
    return base.merged(**overrides) if overrides else base
