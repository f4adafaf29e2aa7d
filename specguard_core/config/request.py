"""`SpecGuardConfig`: the algorithm's per-request configuration, its validation and `merged`."""

from __future__ import annotations

import math
import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specguard_core.config.bounds import NormBounds
from specguard_core.config.engine_config import EngineConfig
from specguard_core.config.experimental import EXPERIMENTAL, ExperimentalConfig

_GREEDY_BELOW = 1e-5  # temperatures below this are greedy (vLLM's _SAMPLING_EPS)


class SpecGuardConfig(BaseModel):
    """The algorithm's per-request configuration (the paper's defaults are the `paper` preset)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # propose
    k: int = Field(4, ge=1, le=64, description="draft candidates per step")
    temperature: float = Field(0.7, ge=0.0, description="0 means greedy")
    top_p: float = Field(0.8, gt=0.0, le=1.0, description="nucleus sampling: the smallest set of "
                         "tokens with this much probability")
    top_k: int = Field(0, ge=-1, description="sample from the k most likely tokens only (0 or -1: "
                       "all); draft and target alike")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="drop tokens below min_p times the top "
                         "token's probability (0: none)")
    repetition_penalty: float = Field(1.0, gt=0.0, description="CTRL/transformers repetition "
                                      "penalty on tokens already in the sequence, prompt included "
                                      "(1: none; greedy too)")
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0, description="subtracted from the "
                                    "logit of every token the reply already holds, as vLLM and "
                                    "OpenAI apply it (the prompt not counted; 0: none), draft and "
                                    "target alike")
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0, description="subtracted from a "
                                     "token's logit once per time the reply already holds it, as "
                                     "vLLM and OpenAI apply it (0: none), draft and target alike")
    step_delimiters: tuple[str, ...] = Field(("\n\n",), description="a step ends after one of these")
    max_step_tokens: int = Field(256, ge=1, description="a step ends after this many tokens, on a "
                                 "whole character (a first character that needs more runs up "
                                 "to 3 tokens past it); a tool call runs on to its closer")
    draft_lookahead: int | None = Field(None, ge=0, le=64, description="each draft forward "
                                        "(speculative fallback runs; a step proposal of one "
                                        "candidate without attention capture) also checks up to "
                                        "this many tokens guessed from an earlier occurrence of "
                                        "the text's last tokens (prompt lookup): the draft writes "
                                        "the same tokens in fewer forwards (0: off; None: the "
                                        "draft's backend's measured default, 8 on transformers, "
                                        "3 on llama.cpp)")
    # score and decide
    beta: float = Field(0.3, ge=0.0, le=1.0, description="weight of confidence in the ensemble")
    tau: float = Field(0.7, description="accept iff score >= tau; -inf always, +inf never "
                     "(route 'check': the score that vouches for a step, acceptance='vouched')")
    bounds: NormBounds = Field(NormBounds(), description="the paper verifier's min-max bounds "
                               "(`specguard calibrate` fits them); left at the defaults, the "
                               "engine uses those shipped for the scoring model, if any "
                               "(`specguard_core/verifiers/bounds/`)")
    verifier: str = Field("auto", min_length=1, description="'auto' (the learned verifier card "
                          "shipped for the scoring model when there is one, else 'paper'), "
                          "'paper' (the beta ensemble of l and g), or the path of a verifier card "
                          "from `specguard verifier-train` (with a card the score is the probe's "
                          "P(step correct))")
    # route and accept
    route: Literal["score", "check"] = Field(
        "score", description="how a draft step is routed: 'score' (the verifier's score r: kept "
        "without the target iff r >= tau_accept, straight to the fallback iff r < tau_reject, else "
        "the target checks it); 'check' (the target checks every step in one pass while the draft "
        "writes it; the score is reported, not used)")
    acceptance: str = Field(
        "typical", min_length=1, description="the token rule by which the target's check judges a "
        "reasoning or answer step's draft tokens (`engine/accept.py`, where a new rule is one "
        "class): 'typical' (Medusa's bound with typical_eps/typical_delta and typical_ratio: "
        "tokens the target could plausibly write; the text may drift from the target's), 'exact' "
        "(the target's own tokens: its argmax when greedy, speculative sampling otherwise: "
        "lossless), 'exact-numbers' (exact on tokens holding a digit, an operator or a list "
        "marker, typical elsewhere), 'vouched' (typical for a step whose verifier score is >= "
        "tau, exact for the rest: the step is relaxed only where the verifier vouches for it)")
    action_acceptance: Literal["exact", "typical"] = Field(
        "exact", description="how the target's check judges an action when tools are offered: a "
        "tool-call step, and the first step of the assistant turn (where the model chooses between "
        "calling and answering). 'exact': the target's own tokens, so calls and the call/answer "
        "choice are the target's; 'typical': as `acceptance` (the agent may act differently from "
        "its target)")
    # fall back
    fallback: Literal["greedy", "sample", "speculative"] = Field(
        "greedy", description="who writes a rejected step: the target greedily or as fallback_k "
        "samples (regenerated), or speculative: the target verifies the draft's step in one pass, "
        "keeps the agreeing prefix and finishes the step with draft-assisted decoding")
    fallback_k: int | None = Field(None, ge=1, le=64, description="fallback='sample': target "
                                   "samples per rejected step, picked by the selector (None: k, "
                                   "as many as the draft proposes)")
    # three-way decision and the speculative fallback (`tau` alone: the paper's two-way rule)
    tau_accept: float | None = Field(None, description="keep without the target iff r >= "
                                     "tau_accept (None: tau)")
    tau_reject: float | None = Field(None, description="straight to the fallback iff r < "
                                     "tau_reject (None: tau); in between the target checks the step")
    typical_eps: float = Field(0.09, ge=0.0, le=1.0, description="typical acceptance: each token "
                               "needs p >= min(typical_eps, typical_delta * exp(-H))")
    typical_delta: float = Field(0.3, ge=0.0, description="typical acceptance: the entropy-scaled "
                                 "part of the bound, p >= min(typical_eps, typical_delta * exp(-H))")
    typical_ratio: float = Field(0.0, ge=0.0, le=1.0, description="typical acceptance: each token "
                                 "also needs p >= typical_ratio * the target's top probability (0: "
                                 "Medusa's bound alone; 1: the target's argmax only)")
    check_tokens: int = Field(0, ge=0, le=256, description="target check while the draft writes "
                              "(k=1, route='check', speculative fallback, draft "
                              "scoring, an in-process or served target of the draft's vocabulary, "
                              "no forced tool call; else each written step is checked): check after every "
                              "check_tokens unchecked draft tokens and stop the draft at the first "
                              "refused one (0: check each step once it is written)")
    check_run_below: float = Field(0.0, ge=0.0, le=1.0, description="with check_tokens: also check "
                                   "once the product of the draft's probabilities of the tokens "
                                   "written since the last check falls below this")
    sd_run_confidence: float = Field(0.0, ge=0.0, le=1.0, description="speculative fallback: the "
                                     "draft also ends its run when the product of its "
                                     "probabilities of the run's tokens (its own estimate that the "
                                     "target keeps the whole run) falls below this (0: never)")
    # answer
    response_format_mode: Literal["constrain", "check"] = Field(
        "constrain", description="how a JSON response_format (json_object, json_schema) is "
        "enforced: 'constrain' (every token of the reply limited to the format's grammar, so the "
        "answer is JSON matching the schema by construction; needs an in-process target sharing "
        "the draft's vocabulary), 'check' (each draft answer step is checked and one off the "
        "format goes to the target; no guarantee, for a served target or a heterogeneous pair). A "
        "json_schema with strict: true and vLLM's structured_outputs are constrained under both")
    # stop
    max_new_tokens: int | None = Field(None, ge=1, description="the answer's token budget "
                                       "(None: until the context window is full)")
    max_steps: int | None = Field(None, ge=1, description="the answer's step budget (None: no "
                                  "step cap)")
    stop: tuple[str, ...] = Field((), description="generation ends at any of these strings (cut there)")
    seed: int = Field(0, description="the request's random seed (sampling, speculative sampling)")
    experimental: ExperimentalConfig = Field(
        default_factory=lambda: ExperimentalConfig(), description="knobs measured and not adopted "
        "(see `ExperimentalConfig`)")

    @model_validator(mode="before")
    @classmethod
    def _experimental_by_name(cls, data: Any) -> Any:
        """An experimental knob at the top level is an error that says where it goes."""
        if isinstance(data, dict) and (names := sorted(EXPERIMENTAL & set(data))):
            raise ValueError(f"{', '.join(names)} is experimental: pass experimental="
                             f"{{{names[0]!r}: ...}} (on the command line --set "
                             f"experimental.{names[0]}=...)")
        return data

    @field_validator("temperature")
    @classmethod
    def _greedy_below_1e5(cls, value: float) -> float:
        """A temperature below 1e-5 samples as greedy would, but dividing logits by it overflows
        (inf/NaN probabilities); like vLLM, treat it as greedy (0)."""
        if not math.isfinite(value):
            raise ValueError("temperature must be a finite number (0 means greedy)")
        return 0.0 if value < _GREEDY_BELOW else value

    @field_validator("top_k")
    @classmethod
    def _all_tokens(cls, value: int) -> int:
        return 0 if value == -1 else value  # -1 means all tokens in vLLM's API, as 0 does here

    @field_validator("repetition_penalty")
    @classmethod
    def _finite_penalty(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("repetition_penalty must be a finite number > 0 (1 means none)")
        return value

    @field_validator("seed")
    @classmethod
    def _seed_range(cls, value: int) -> int:
        if not 0 <= value < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {value}")
        return value

    @model_validator(mode="after")
    def _check(self) -> SpecGuardConfig:
        if not self.step_delimiters or any(not d for d in self.step_delimiters):
            raise ValueError("step_delimiters must be non-empty strings")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop strings must be non-empty (an empty string would match "
                             "everywhere); pass stop=() for none")
        if math.isnan(self.tau):
            raise ValueError("tau must be a number (use inf/-inf to always reject/accept)")
        if any(t is not None and math.isnan(t) for t in (self.tau_accept, self.tau_reject)):
            raise ValueError("tau_accept/tau_reject must be numbers (inf/-inf allowed) or None")
        accept_at, reject_below = self.thresholds
        if reject_below > accept_at:
            raise ValueError(f"tau_reject ({reject_below}) must be <= tau_accept ({accept_at}); set "
                             "both (an unset one follows tau)")
        if self.route == "check" and "tau" in self.model_fields_set and self.acceptance != "vouched":
            raise ValueError(f"tau={self.tau} has no effect with route='check' (the target checks "
                             "every step): pass route='score' to keep draft steps whose score is "
                             ">= tau without the target, or acceptance='vouched' to relax the "
                             "check where the score is >= tau")
        if self.route == "check" and (self.tau_accept, self.tau_reject) != (None, None):
            warnings.warn("tau_accept/tau_reject have no effect with route='check' (the target "
                          "checks every step); use route='score' for the three-way decision",
                          UserWarning, stacklevel=2)
        if self.k > 1 and self.temperature == 0:
            warnings.warn(f"k={self.k} at temperature=0 proposes {self.k} identical greedy "
                          "candidates (and turns off the check while the draft writes): set a "
                          "temperature > 0 for k > 1, or k=1", UserWarning, stacklevel=2)
        return self

    @property
    def fallback_samples(self) -> int:
        """The target's samples per rejected step with fallback='sample': `fallback_k`, or `k`
        when it is unset."""
        return self.k if self.fallback_k is None else self.fallback_k

    @property
    def thresholds(self) -> tuple[float, float]:
        """(tau_accept, tau_reject) with unset ones following `tau`."""
        return (self.tau if self.tau_accept is None else self.tau_accept,
                self.tau if self.tau_reject is None else self.tau_reject)

    def merged(self, **overrides: Any) -> SpecGuardConfig:
        """A validated copy with `overrides` applied (None values are ignored); `self` when there
        is nothing to apply. An engine setting or unknown name is an error that says where it goes."""
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if not overrides:
            return self
        misplaced = sorted(set(overrides) & set(EngineConfig.model_fields))
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} is an engine setting, fixed when the engine is "
                             "built: pass SpecGuardEngine(..., engine_config=EngineConfig(...)), not "
                             "a per-request override")
        unknown = sorted(set(overrides) - set(SpecGuardConfig.model_fields) - EXPERIMENTAL)
        if unknown:
            raise ValueError(f"unknown SpecGuardConfig field(s) {unknown}; valid: "
                             f"{sorted(SpecGuardConfig.model_fields)}, and under experimental: "
                             f"{sorted(EXPERIMENTAL)}")
        # what was set stays set (`model_fields_set`), so a check of what was asked for holds
        base = {name: getattr(self, name) for name in self.model_fields_set}
        if "tau" in overrides:  # tau alone is the two-way rule at tau: unset thresholds follow it
            base.pop("tau_accept", None)
            base.pop("tau_reject", None)
        if "experimental" in overrides:  # a partial experimental config changes only what it names
            extra = overrides.pop("experimental")
            extra = extra.model_dump(exclude_unset=True) if isinstance(extra, BaseModel) \
                else dict(extra)
            now = self.experimental.model_dump(exclude_unset=True)
            base["experimental"] = {**now, **extra}
        return SpecGuardConfig.model_validate({**base, **overrides})
