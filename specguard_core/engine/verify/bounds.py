"""Normaliser bounds for the paper's verifier: fitted to step signals (`fitted_bounds`, what
`SpecGuardEngine.calibrate` measures them for), and shipped with the package, one JSON file per
model in `specguard_core/verifiers/bounds/`, matched to the scoring model by the same `Fingerprint` verifier
cards use. A request whose `bounds` are the defaults (`NormBounds()`) gets the bounds shipped for
its scoring model when there are some (`Cards.bounds`, applied by the engine per request);
bounds a request sets win.

A file: {"model": <Fingerprint>, "bounds": <NormBounds>, "source": "how they were fitted"};
`NormBounds.load` reads it too (the four fields under "bounds").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from specguard_core import verifiers
from specguard_core.config import NormBounds
from specguard_core.engine.verify.fingerprint import Fingerprint, fingerprint
from specguard_core.engine.verify.signals import percentile_bounds


def fitted_bounds(confidence: list[float], grounding: list[float], low_q: float = 1.0,
                  high_q: float = 99.0) -> NormBounds:
    """Bounds at the `low_q` and `high_q` percentiles of the steps' confidence and grounding
    signals; with no grounding (beta == 1: none was computed) its bounds keep their defaults."""
    c_lo, c_hi = percentile_bounds(confidence, low_q, high_q)
    default = NormBounds()
    g_lo, g_hi = (percentile_bounds(grounding, low_q, high_q) if grounding
                  else (default.grounding_min, default.grounding_max))
    return NormBounds(confidence_min=c_lo, confidence_max=c_hi, grounding_min=g_lo,
                      grounding_max=g_hi)


class ShippedBounds(BaseModel):
    """One shipped bounds file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Fingerprint
    bounds: NormBounds
    source: str = ""  # how they were fitted (informational)

    @classmethod
    def load(cls, path: Path) -> ShippedBounds:
        try:
            return cls.model_validate_json(path.read_text(encoding="utf-8"))
        except (ValidationError, ValueError) as err:
            raise ValueError(f"{path} is not a valid shipped bounds file ({err}); reinstall "
                             "specguard or remove the file") from None


def bounds_dir() -> Path:
    """Where the shipped bounds files live (under the shipped cards' folder)."""
    return verifiers.SHIPPED_DIR / "bounds"


def shipped_bounds_for(here: Fingerprint, folder: Path | None = None) -> NormBounds | None:
    """The shipped bounds fitted on the model `here` fingerprints, or None."""
    for path in sorted((folder or bounds_dir()).glob("*.json")):
        found = ShippedBounds.load(path)
        if not found.model.mismatch(here):
            return found.bounds
    return None


def shipped_bounds(model: Any, tokenizer: Any) -> NormBounds | None:
    """The shipped bounds fitted on this loaded model, or None."""
    return shipped_bounds_for(Fingerprint.model_validate(fingerprint(model, tokenizer)))
