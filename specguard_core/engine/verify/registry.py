"""One seam for verifiers: what a verifier reads (`Scores`), what it is (`Verifier`), and the
registry that turns the config's `verifier` name into one.

Built in: "paper" (the paper's ensemble of confidence and grounding, `PaperVerifier`) and any
other name, read as the path of a learned verifier card (`CardVerifier`, see `cards.py`).
"auto" is resolved per model by the engine first (`Cards.resolve`: the card shipped for the
scoring model, else "paper"). A new verifier is one class with the three members below and one
`register("name", factory)` call; `SpecGuardConfig(verifier="name")` then uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from specguard_core.config import SpecGuardConfig
from specguard_core.engine.verify import signals
from specguard_core.engine.verify.cards import load_probe


@dataclass(frozen=True)
class Scores:
    """A draft step's signals, as every verifier reads them."""

    confidence: float
    grounding: float | None  # None: not computed (beta == 1, no attention captured)
    # what a learned verifier (probe card) reads: Candidate.pooled, and the step's other scalars
    pooled: Mapping[int, torch.Tensor] = field(default_factory=dict)  # layer -> [d]
    mean_logprob: float | None = None
    n_tokens: int | None = None

    def scalars(self) -> dict[str, float]:
        """The named scalar features that were computed (a probe card refers to them by name)."""
        named = {"confidence": self.confidence, "grounding": self.grounding,
                 "mean_logprob": self.mean_logprob, "n_tokens": self.n_tokens}
        return {k: float(v) for k, v in named.items() if v is not None}


class Verifier(Protocol):
    """Scores a draft step from the scoring model's signals; r is what the route thresholds."""

    def reads_grounding(self) -> bool:
        """Whether it needs attention rows (grounding): capture costs time otherwise saved."""
        ...

    def hidden_layers(self, model: Any, tokenizer: Any) -> tuple[int, ...]:
        """Hidden layers of `model` whose step means it reads (checking it was made for this
        model: raise `cards.CardError` otherwise); () for none."""
        ...

    def score(self, scores: Scores, cfg: SpecGuardConfig) -> float:
        """r for one step."""
        ...


def paper_score(scores: Scores, cfg: SpecGuardConfig) -> float:
    """The paper's verifier: r = beta * l~ + (1 - beta) * g~ with min-max bounds. Grounding may be
    missing only when beta == 1 (its weight is 0)."""
    b = cfg.bounds
    conf = signals.min_max(scores.confidence, b.confidence_min, b.confidence_max)
    if scores.grounding is None and cfg.beta < 1:
        raise ValueError("grounding was not computed but beta < 1 gives it weight")
    ground = 0.0 if scores.grounding is None else signals.min_max(
        scores.grounding, b.grounding_min, b.grounding_max)
    return signals.ensemble(conf, ground, cfg.beta)


class PaperVerifier:
    """The paper's ensemble (`paper_score`), with the config's `beta` and `bounds`."""

    def reads_grounding(self) -> bool:
        return True

    def hidden_layers(self, model: Any, tokenizer: Any) -> tuple[int, ...]:
        return ()

    def score(self, scores: Scores, cfg: SpecGuardConfig) -> float:
        return paper_score(scores, cfg)


@dataclass(frozen=True)
class CardVerifier:
    """A learned verifier card at `path`: r is its probe's P(step correct)."""

    path: str

    def reads_grounding(self) -> bool:
        return "grounding" in load_probe(self.path).card.features

    def hidden_layers(self, model: Any, tokenizer: Any) -> tuple[int, ...]:
        card = load_probe(self.path).card
        card.check_model(model, tokenizer, self.path)
        return card.hidden_layers()

    def score(self, scores: Scores, cfg: SpecGuardConfig) -> float:
        return load_probe(self.path).score(scores.pooled, scores.scalars())


_REGISTRY: dict[str, Callable[[], Verifier]] = {"paper": PaperVerifier}


def register(name: str, factory: Callable[[], Verifier]) -> None:
    """Make `verifier=name` mean `factory()` (a name that is not a path; "auto" is reserved)."""
    if name == "auto":
        raise ValueError("'auto' is reserved: it resolves to the card shipped for the scoring model")
    _REGISTRY[name] = factory


def verifier_for(name: str) -> Verifier:
    """The verifier the config's `verifier` names: a registered one, else a card at that path."""
    if name == "auto":  # a programming error: the engine resolves it per request
        raise ValueError("verifier='auto' must be resolved to 'paper' or a card path first "
                         "(SpecGuardEngine does this per request)")
    factory = _REGISTRY.get(name)
    return factory() if factory is not None else CardVerifier(name)
