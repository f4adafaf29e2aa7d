"""`ExperimentalConfig`: the knobs measured and not adopted, and the methods' constants that no
preset changes; read as `config.experimental.<name>`, set as `SpecGuardConfig(experimental={...})`
or `config.merged(experimental={...})`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ExperimentalConfig(BaseModel):
    """Knobs measured and not adopted, and constants of the methods SpecGuard builds on (the
    paper's attention rollout, transformers' assisted generation) that no preset changes:
    settable and tested (`SpecGuardConfig(experimental={"check_below": 0.2})`, `--set
    experimental.check_below=0.2`); why each knob was not adopted: `benchmarks/notes/`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grounding_layers: int = Field(3, ge=1, description="grounding: the last layers whose attention "
                                  "the rollout reads (the paper's 3)")
    sparsify_threshold: float = Field(0.01, ge=0.0, lt=1.0, description="grounding: attention "
                                      "weights below this are dropped before the rollout (the "
                                      "paper's 0.01)")

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
    check_below: float = Field(0.0, ge=0.0, le=1.0, description="with check_tokens: also check right "
                               "after a draft token the draft itself gave less than this probability")
    fallback_acceptance: Literal["exact", "typical"] = Field(
        "exact", description="speculative fallback, greedy: keep the drafted tokens equal to the "
        "target's argmax (exact: the target's greedy text), or also those that pass the target "
        "check's typical acceptance (typical_eps, typical_delta, typical_ratio)")
    sd_draft_tokens: int = Field(5, ge=1, le=64, description="speculative fallback: tokens the "
                                 "draft proposes per target pass at first (+2 if all kept, -1 if "
                                 "not; transformers' assisted generation)")
    sd_max_draft_tokens: int = Field(16, ge=1, le=64, description="speculative fallback: the most "
                                     "tokens one draft run may grow to")
    sd_confidence: float = Field(0.0, ge=0.0, le=1.0, description="speculative fallback: the draft "
                                 "ends its run after a token it gives less than this probability "
                                 "(transformers' assistant_confidence_threshold; 0: never)")

    @model_validator(mode="after")
    def _check(self) -> ExperimentalConfig:
        if self.selector == "sentence-transformer" and not self.sentence_transformer:
            raise ValueError("selector='sentence-transformer' needs sentence_transformer=<path>")
        return self


EXPERIMENTAL = frozenset(ExperimentalConfig.model_fields)
