"""`ExperimentalConfig`: the knobs measured and not adopted, and the papers' constants; the set
of their names, the move of old top-level names under "experimental", and the read-through
properties that keep `config.typical_eps` meaning `config.experimental.typical_eps`."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ExperimentalConfig(BaseModel):
    """Knobs measured and not adopted, and constants of the papers the method builds on (the
    attention rollout, Medusa's typical acceptance, transformers' assisted generation). Settable
    and tested; the presets and the main docs use the defaults unless they say otherwise
    (`SpecGuardConfig(experimental=ExperimentalConfig(...))` or `merged(check_below=...)`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grounding_layers: int = Field(3, ge=1, description="last layers used by the rollout")
    sparsify_threshold: float = Field(0.01, ge=0.0, lt=1.0, description="attention weights below "
                                      "this are dropped before the rollout")
    rollout_residual: bool = Field(False, description="add the identity (residual stream) to each "
                                   "layer's attention in the rollout")
    selector: Literal["hidden", "sentence-transformer"] = Field(
        "hidden", description="how one of k candidates is picked: the soft medoid of the proposing "
        "model's mean-pooled hidden states, or of a sentence-transformer's embeddings")
    sentence_transformer: str | None = Field(None, description="the sentence-transformer folder for "
                                             "selector='sentence-transformer' (extra [st])")
    scoring_model: Literal["draft", "target"] = Field(
        "draft", description="whose internals the verifier reads: the draft's (free) or the target's "
        "(one target pass per step)")
    typical_eps: float = Field(0.09, ge=0.0, le=1.0, description="target check: each token needs "
                               "p >= min(typical_eps, typical_delta * exp(-H))")
    typical_delta: float = Field(0.3, ge=0.0, description="the entropy-scaled part of the typical "
                                 "bound: p >= min(typical_eps, typical_delta * exp(-H))")
    check_below: float = Field(0.0, ge=0.0, le=1.0, description="with check_tokens: also check right "
                               "after a draft token the draft itself gave less than this probability")
    check_run_below: float = Field(0.0, ge=0.0, le=1.0, description="with check_tokens: also check "
                                   "once the product of the draft's probabilities of the tokens "
                                   "written since the last check falls below this (`balanced`: 0.5)")
    fallback_acceptance: Literal["exact", "typical"] = Field(
        "exact", description="speculative fallback, greedy: keep the drafted tokens equal to the "
        "target's argmax (exact: the target's greedy text), or also those that pass the target "
        "check's typical acceptance (typical_eps, typical_delta, typical_ratio)")
    sd_draft_tokens: int = Field(5, ge=1, le=64, description="speculative fallback: tokens the "
                                 "draft proposes per target pass at first (+2 if all kept, -1 if not)")
    sd_max_draft_tokens: int = Field(16, ge=1, le=64, description="speculative fallback: the most "
                                     "tokens one draft run may grow to")
    sd_confidence: float = Field(0.0, ge=0.0, le=1.0, description="speculative fallback: the draft "
                                 "ends its run after a token it gives less than this probability "
                                 "(transformers' assistant_confidence_threshold; 0: never)")
    draft_lookahead: int = Field(8, ge=0, le=64, description="each draft forward (speculative "
                                 "fallback runs; a step proposal of one candidate without "
                                 "attention capture) also checks up to this many tokens guessed "
                                 "from an earlier occurrence of the text's last tokens (prompt "
                                 "lookup): the draft writes the same tokens in fewer forwards "
                                 "(0: off)")

    @model_validator(mode="after")
    def _check(self) -> ExperimentalConfig:
        if self.selector == "sentence-transformer" and not self.sentence_transformer:
            raise ValueError("selector='sentence-transformer' needs sentence_transformer=<path>")
        return self


EXPERIMENTAL = frozenset(ExperimentalConfig.model_fields)


def move_experimental(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its top-level experimental knobs moved under "experimental" (merged with what
    is there)."""
    top = {k: v for k, v in data.items() if k in EXPERIMENTAL}
    nested = data.get("experimental") or {}
    nested = nested.model_dump() if isinstance(nested, BaseModel) else dict(nested)
    rest = {k: v for k, v in data.items() if k not in EXPERIMENTAL}
    return {**rest, "experimental": {**nested, **top}}


class _HasExperimental(Protocol):
    @property
    def experimental(self) -> ExperimentalConfig: ...


class ExperimentalAliases:
    """Read-only properties naming each experimental knob at the top level of a config that has
    an `experimental` field (`SpecGuardConfig`)."""

    @property
    def grounding_layers(self: _HasExperimental) -> Any:
        """`experimental.grounding_layers`."""
        return self.experimental.grounding_layers

    @property
    def sparsify_threshold(self: _HasExperimental) -> Any:
        """`experimental.sparsify_threshold`."""
        return self.experimental.sparsify_threshold

    @property
    def rollout_residual(self: _HasExperimental) -> Any:
        """`experimental.rollout_residual`."""
        return self.experimental.rollout_residual

    @property
    def selector(self: _HasExperimental) -> Any:
        """`experimental.selector`."""
        return self.experimental.selector

    @property
    def sentence_transformer(self: _HasExperimental) -> Any:
        """`experimental.sentence_transformer`."""
        return self.experimental.sentence_transformer

    @property
    def scoring_model(self: _HasExperimental) -> Any:
        """`experimental.scoring_model`."""
        return self.experimental.scoring_model

    @property
    def typical_eps(self: _HasExperimental) -> Any:
        """`experimental.typical_eps`."""
        return self.experimental.typical_eps

    @property
    def typical_delta(self: _HasExperimental) -> Any:
        """`experimental.typical_delta`."""
        return self.experimental.typical_delta

    @property
    def check_below(self: _HasExperimental) -> Any:
        """`experimental.check_below`."""
        return self.experimental.check_below

    @property
    def check_run_below(self: _HasExperimental) -> Any:
        """`experimental.check_run_below`."""
        return self.experimental.check_run_below

    @property
    def fallback_acceptance(self: _HasExperimental) -> Any:
        """`experimental.fallback_acceptance`."""
        return self.experimental.fallback_acceptance

    @property
    def draft_lookahead(self: _HasExperimental) -> Any:
        """`experimental.draft_lookahead`."""
        return self.experimental.draft_lookahead

    @property
    def sd_draft_tokens(self: _HasExperimental) -> Any:
        """`experimental.sd_draft_tokens`."""
        return self.experimental.sd_draft_tokens

    @property
    def sd_max_draft_tokens(self: _HasExperimental) -> Any:
        """`experimental.sd_max_draft_tokens`."""
        return self.experimental.sd_max_draft_tokens

    @property
    def sd_confidence(self: _HasExperimental) -> Any:
        """`experimental.sd_confidence`."""
        return self.experimental.sd_confidence
