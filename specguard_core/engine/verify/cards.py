"""A learned internal verifier: a logistic-regression probe on the scoring model's own hidden states
(and optionally the paper's scalar signals), saved as a small JSON "verifier card".

score = sigmoid(w . standardise(x) + b) is the probe's probability that the step is correct, so tau
reads as a probability. `x` is the card's feature list in order: `hidden:<layer>` (the mean hidden
state of that layer over the step's fed tokens, `Candidate.pooled[layer]`, d values) and scalar
features by name (`confidence`, `grounding`, `n_tokens`, ...). At generation time this is one dot
product on states the draft already computed. A card belongs to one model: loading it for another
model (fingerprint mismatch, `fingerprint.py`: config, shape and, when the card records one, a
digest of the weights) is refused.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specguard_core import verifiers
from specguard_core.config import NormBounds
from specguard_core.engine.verify.bounds import shipped_bounds
from specguard_core.engine.verify.fingerprint import Fingerprint, fingerprint

__all__ = ["SCALARS", "CardError", "Cards", "Fingerprint", "Probe", "VerifierCard", "fingerprint",
           "load_probe", "shipped_card", "shipped_card_for"]

SCALARS = ("confidence", "grounding", "mean_logprob", "n_tokens")  # what a step's scoring computes
# the largest size of a card's mean, bias and weight over scale: a probe trained on standardised
# features is far below it, and past it w . x overflows to inf (and inf - inf to a NaN score)
LIMIT = 1e12


class CardError(ValueError):
    """A verifier card that cannot be used here; the message says why and what to do."""


class VerifierCard(BaseModel):
    """A trained probe. `features` are `hidden:<layer>` blocks and scalar names, in order; `mean` and
    `scale` standardise the concatenated vector, `weights` has one value per vector entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["logistic-probe"] = "logistic-probe"
    version: Literal[1] = 1
    model: Fingerprint
    pooling: str = "mean"
    features: list[str] = Field(min_length=1)
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    cv: dict[str, Any] = Field(default_factory=dict)  # cross-validated AUROC etc. (informational)
    threshold: float | None = Field(None, ge=0, le=1)  # chosen for `threshold_precision`
    threshold_precision: float | None = Field(None, ge=0, le=1)
    training: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shapes(self) -> VerifierCard:
        if self.pooling != "mean":
            raise ValueError(f"pooling {self.pooling!r} is not available while generating; use 'mean'")
        for f in self.features:
            self._check_feature(f)
        if len(set(self.features)) != len(self.features):
            raise ValueError("a feature is listed twice")
        if not len(self.mean) == len(self.scale) == len(self.weights):
            raise ValueError(f"mean ({len(self.mean)}), scale ({len(self.scale)}) and weights "
                             f"({len(self.weights)}) must have the same length")
        if len(self.weights) != self.width():
            raise ValueError(f"weights has {len(self.weights)} entries but the features need "
                             f"{self.width()}")
        numbers = [*self.mean, *self.scale, *self.weights, self.bias]
        if not all(math.isfinite(x) for x in numbers):  # a NaN score is neither kept nor rejected
            raise ValueError("mean, scale, weights and bias must be finite numbers (no NaN or "
                             "infinity); retrain the card with `specguard verifier-train`")
        if any(s <= 0 for s in self.scale):
            raise ValueError("every scale must be > 0")
        if max(abs(self.bias), *map(abs, self.mean),
               *(abs(w) / s for w, s in zip(self.weights, self.scale, strict=True))) > LIMIT:
            raise ValueError(f"mean, bias or a weight over its scale is larger than {LIMIT:g}, "
                             "so scores would overflow; retrain the card with `specguard "
                             "verifier-train`")
        return self

    def _check_feature(self, feature: str) -> None:
        """A feature the engine computes: `hidden:<layer>` of the card's model, or a scalar."""
        if feature.startswith("hidden:"):
            layer = feature.split(":", 1)[1]
            if not layer.isdigit() or int(layer) > self.model.num_layers:
                raise ValueError(f"feature {feature[:40]!r} names no layer of a "
                                 f"{self.model.num_layers}-layer model (hidden:0 .. hidden:N)")
        elif feature not in SCALARS:
            raise ValueError(f"feature {feature[:40]!r} is neither hidden:<layer> nor a scalar "
                             f"the engine computes ({', '.join(SCALARS)})")

    def hidden_layers(self) -> tuple[int, ...]:
        """Layers whose pooled hidden state the probe reads (what the proposer must pool)."""
        return tuple(int(f.split(":", 1)[1]) for f in self.features if f.startswith("hidden:"))

    def width(self) -> int:
        return sum(self.model.hidden_size if f.startswith("hidden:") else 1 for f in self.features)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> VerifierCard:
        """The card in the JSON file `path`, checked whole: anything wrong with it (missing,
        unreadable, not UTF-8 JSON, any field) is one CardError that says what."""
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise CardError(f"verifier card {path} not found; pass verifier='paper' or a card from "
                            "`specguard verifier-train`") from None
        except OSError as err:
            raise CardError(f"verifier card {path} cannot be read ({err.strerror or err}); pass "
                            "the path of a card file") from None
        try:
            return cls.model_validate_json(data)
        except ValidationError as err:  # one line: where and what, never pydantic's dump
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'card'}: "
                            f"{e['msg'].removeprefix('Value error, ')}" for e in err.errors())
            raise CardError(f"{path} is not a valid verifier card ({why})") from None

    def check_model(self, model: Any, tokenizer: Any, path: str | Path = "") -> None:
        """Refuse a card trained on another model."""
        here = Fingerprint.model_validate(fingerprint(model, tokenizer))
        diff = self.model.mismatch(here)
        if diff == ["weights_sha256"]:
            raise CardError(
                f"verifier card {path or ''} was trained on {self.model.name}, but the scoring "
                f"model {here.name} has its config and other weights (a fine-tune?); train a card "
                "for this model with `specguard verifier-train --model ...` or use "
                "verifier='paper'")
        if diff:
            raise CardError(
                f"verifier card {path or ''} was trained on {self.model.name} but the scoring model "
                f"is {here.name} ({', '.join(diff)} differ); train a card for this model with "
                "`specguard verifier-train --model ...` or use verifier='paper'")


class Probe:
    """A loaded card, ready to score: tensors built once."""

    def __init__(self, card: VerifierCard) -> None:
        self.card = card
        self.mean = torch.tensor(card.mean, dtype=torch.float64)
        self.scale = torch.tensor(card.scale, dtype=torch.float64)
        self.weights = torch.tensor(card.weights, dtype=torch.float64)

    def vector(self, pooled: Mapping[int, torch.Tensor], scalars: Mapping[str, float]
               ) -> torch.Tensor:
        """The card's feature vector `[width]` from pooled hidden states and named scalars."""
        parts: list[torch.Tensor] = []
        for f in self.card.features:
            if f.startswith("hidden:"):
                layer = int(f.split(":", 1)[1])
                if layer not in pooled:
                    raise CardError(f"the probe reads hidden layer {layer} but it was not pooled")
                parts.append(pooled[layer].detach().reshape(-1).to(torch.float64).cpu())
            else:
                if f not in scalars or scalars[f] is None:
                    hint = " (grounding is computed only when beta < 1)" if f == "grounding" else ""
                    raise CardError(f"the probe needs the scalar feature {f!r}, which was not "
                                    f"computed{hint}; have {sorted(scalars)}")
                parts.append(torch.tensor([float(scalars[f])], dtype=torch.float64))
        return torch.cat(parts)

    def score(self, pooled: Mapping[int, torch.Tensor], scalars: Mapping[str, float]) -> float:
        """P(step is correct) = sigmoid(w . (x - mean) / scale + b)."""
        x = (self.vector(pooled, scalars) - self.mean) / self.scale  # [width]
        z = float(x @ self.weights) + self.card.bias
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


_LOADED: dict[tuple[str, int], Probe] = {}


def shipped_card(model: Any, tokenizer: Any, folder: Path | None = None) -> Path | None:
    """The shipped card trained on this model (same fingerprint), or None. Reads only the cards'
    JSON; what `verifier="auto"` resolves to."""
    return shipped_card_for(Fingerprint.model_validate(fingerprint(model, tokenizer)), folder)


def shipped_card_for(here: Fingerprint, folder: Path | None = None) -> Path | None:
    """The shipped card whose model fingerprint is `here`, or None."""
    for path in sorted((folder or verifiers.SHIPPED_DIR).glob("*.json")):
        if not VerifierCard.load(path).model.mismatch(here):
            return path
    return None


def _warn_near_miss(here: Fingerprint) -> None:
    """Say so when a shipped card was trained on a model of this shape whose config differs (e.g.
    the hub's folder of the model a card's `specguard models fetch` bundle converts), or whose
    weights differ (a fine-tune): `auto` then means the paper's ensemble, whose thresholds read
    differently."""
    for path in sorted(verifiers.SHIPPED_DIR.glob("*.json")):
        card = VerifierCard.load(path)
        diff = card.model.mismatch(here)
        if diff == ["weights_sha256"]:
            warnings.warn(f"verifier='auto': {path.name} was trained on {card.model.name}, and "
                          f"{here.name} has its config but other weights (a fine-tune?), so the "
                          "paper's ensemble scores the steps; train a card for this model with "
                          "`specguard verifier-train`", stacklevel=4)
        elif diff and set(diff) <= {"config_sha256", "weights_sha256"}:
            warnings.warn(f"verifier='auto': {path.name} was trained on {card.model.name}, a model "
                          f"of the same shape as {here.name} but with another config, so the "
                          "paper's ensemble scores the steps; load the model the card names (or "
                          "pass its path as verifier= if you know they are the same)",
                          stacklevel=4)


class Cards:
    """One engine's view of the verifier cards: what `verifier="auto"` means for each of its
    models (resolved once), and which (card, model) fingerprints were already checked. Models
    are told apart by identity, not by name (two models built in memory share a class name)."""

    def __init__(self) -> None:
        self._auto: dict[int, str] = {}  # id(model) -> "paper" or the shipped card's path
        self._bounds: dict[int, NormBounds | None] = {}  # id(model) -> its shipped bounds
        self._layers: dict[tuple[str, int], tuple[int, ...]] = {}  # (verifier, id(model))

    def resolve(self, verifier: str, model: Any, tokenizer: Any) -> str:
        """`verifier` itself, or for "auto" the card shipped for this model, else "paper"."""
        if verifier != "auto":
            return verifier
        if id(model) not in self._auto:
            card = shipped_card(model, tokenizer)
            self._auto[id(model)] = "paper" if card is None else str(card)
            if card is None:
                _warn_near_miss(Fingerprint.model_validate(fingerprint(model, tokenizer)))
        return self._auto[id(model)]

    def bounds(self, bounds: NormBounds, model: Any, tokenizer: Any) -> NormBounds:
        """`bounds` itself, or for the defaults (`NormBounds()`) the bounds shipped for this
        scoring model when there are some (`bounds.py`), looked up once per model."""
        if bounds != NormBounds():
            return bounds
        if id(model) not in self._bounds:
            self._bounds[id(model)] = shipped_bounds(model, tokenizer)
        return self._bounds[id(model)] or bounds

    def hidden_layers(self, verifier: Any, model: Any, tokenizer: Any) -> tuple[int, ...]:
        """`verifier.hidden_layers(model, tokenizer)`, its check that it was made for this model
        run once per (verifier, model): a card for another model is a CardError."""
        key = (repr(verifier), id(model))
        if key not in self._layers:
            self._layers[key] = verifier.hidden_layers(model, tokenizer)
        return self._layers[key]


def load_probe(path: str | Path) -> Probe:
    """The card at `path`, loaded once per file version (keyed by resolved path and mtime)."""
    p = Path(path).expanduser().resolve()
    try:
        key = (str(p), p.stat().st_mtime_ns)
    except FileNotFoundError:
        raise CardError(f"verifier card {path} not found; pass verifier='paper' or a card from "
                        "`specguard verifier-train`") from None
    if key not in _LOADED:
        _LOADED[key] = Probe(VerifierCard.load(p))
    return _LOADED[key]
