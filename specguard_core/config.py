"""Typed configuration: `SpecGuardConfig` (per request: every knob of the algorithm), `EngineConfig`
(per engine: how the pair is wired), `NormBounds`, and the presets.

As nano-vllm keeps `Config` apart from `SamplingParams`: a request can change any `SpecGuardConfig`
field (`engine.generate(..., config=cfg)` or `engine.generate(..., k=4)`), never an engine field.
Both are immutable; `config.merged(**overrides)` returns a validated copy.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Acceptance = Literal["typical", "exact", "exact-numbers"]  # the target check's rules (`speculative.py`)
_GREEDY_BELOW = 1e-5  # temperatures below this are greedy (vLLM's _SAMPLING_EPS)


class NormBounds(BaseModel):
    """Min-max bounds that map the raw signals to [0, 1] (values outside are clipped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence_min: float = Field(-8.0, description="confidence l (mean log-prob) mapped to 0")
    confidence_max: float = Field(0.0, description="confidence mapped to 1")
    grounding_min: float = Field(0.0, description="grounding g mapped to 0")
    grounding_max: float = Field(1.0, description="grounding mapped to 1")

    @model_validator(mode="after")
    def _ordered(self) -> NormBounds:
        for name, value in self.model_dump().items():
            if not math.isfinite(value):
                raise ValueError(f"bounds must be finite numbers, got {name}={value} (a NaN or infinite "
                                 "bound rejects or keeps every step)")
        if not self.confidence_min < self.confidence_max:
            raise ValueError("confidence_min must be < confidence_max")
        if not self.grounding_min < self.grounding_max:
            raise ValueError("grounding_min must be < grounding_max")
        return self

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.model_dump(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> NormBounds:
        """Bounds from a JSON file (as `save` or `specguard calibrate` writes it: the four fields,
        optionally under "bounds"). Raises FileNotFoundError or ValueError naming the file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"bounds file {path} not found; create it with `specguard calibrate`"
            ) from None
        except (ValueError, RecursionError) as err:  # empty, not JSON, not UTF-8
            raise ValueError(f"bounds file {path} is not valid JSON ({err}); recreate it with "
                             "`specguard calibrate`") from None
        if isinstance(data, dict) and isinstance(data.get("bounds"), dict):
            data = data["bounds"]
        if not isinstance(data, dict):
            raise ValueError(f"bounds file {path} holds a {type(data).__name__}, not an object "
                             "with confidence_min/max and grounding_min/max")
        try:
            return cls.model_validate(data)
        except ValueError as err:
            raise ValueError(f"bounds file {path}: {err}") from None


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
                                   "written since the last check falls below this")
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
    step_delimiters: tuple[str, ...] = Field(("\n\n",), description="a step ends after one of these")
    max_step_tokens: int = Field(256, ge=1, description="a step ends after this many tokens, on a "
                                 "whole character (a first character that needs more runs up "
                                 "to 3 tokens past it)")
    # score and decide
    beta: float = Field(0.3, ge=0.0, le=1.0, description="weight of confidence in the ensemble")
    tau: float = Field(0.7, description="accept iff score >= tau; -inf always, +inf never")
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
    acceptance: Acceptance = Field(
        "typical", description="how the target's check judges a reasoning or answer step's draft "
        "tokens: 'typical' (Medusa's bound with typical_eps/typical_delta and typical_ratio: "
        "tokens the target could plausibly write; the text may drift from the target's), 'exact' "
        "(the target's own tokens: its argmax when greedy, speculative sampling otherwise: "
        "lossless), 'exact-numbers' (exact on tokens holding a digit, an operator or a list "
        "marker, typical elsewhere)")
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
    typical_ratio: float = Field(0.0, ge=0.0, le=1.0, description="target check: each token also "
                                 "needs p >= typical_ratio * the target's top probability (0: "
                                 "Medusa's bound alone; 1: the target's argmax only)")
    check_tokens: int = Field(0, ge=0, le=256, description="target check while the draft writes "
                              "(k=1, route='check', speculative fallback, draft "
                              "scoring, an in-process or served target of the draft's vocabulary, "
                              "no forced tool call; else each written step is checked): check after every "
                              "check_tokens unchecked draft tokens and stop the draft at the first "
                              "refused one (0: check each step once it is written)")
    sd_run_confidence: float = Field(0.0, ge=0.0, le=1.0, description="speculative fallback: the "
                                     "draft also ends its run when the product of its "
                                     "probabilities of the run's tokens (its own estimate that the "
                                     "target keeps the whole run) falls below this (0: never)")
    # stop
    max_new_tokens: int = Field(512, ge=1, description="the answer's token budget")
    max_steps: int = Field(64, ge=1, description="the answer's step budget")
    stop: tuple[str, ...] = Field((), description="generation ends at any of these strings (cut there)")
    seed: int = Field(0, description="the request's random seed (sampling, speculative sampling)")
    experimental: ExperimentalConfig = Field(
        default_factory=lambda: ExperimentalConfig(), description="knobs measured and not adopted, "
        "and the papers' constants (see `ExperimentalConfig`)")

    @model_validator(mode="before")
    @classmethod
    def _check_route_alias(cls, data: Any) -> Any:
        """`tau_accept=inf, tau_reject=-inf` was how to say "the target checks every step": it
        still means `route="check"`, with a DeprecationWarning. An experimental knob given at the
        top level (its old place) goes under `experimental`, with a DeprecationWarning too."""
        if isinstance(data, dict) and (old := sorted(EXPERIMENTAL & set(data))):
            warnings.warn(f"{', '.join(old)}: experimental knobs now live under `experimental` "
                          f"(SpecGuardConfig(experimental={{{old[0]!r}: ...}})); the top-level name "
                          "goes in the next release", DeprecationWarning, stacklevel=2)
            data = move_experimental(data)
        if (isinstance(data, dict) and data.get("route", "score") == "score"
                and data.get("tau_accept") == math.inf and data.get("tau_reject") == -math.inf):
            warnings.warn("tau_accept=inf, tau_reject=-inf is deprecated: pass route='check' (the "
                          "target checks every step)", DeprecationWarning, stacklevel=2)
            data = {**data, "route": "check", "tau_accept": None, "tau_reject": None}
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
    def grounding_layers(self) -> Any:
        """`experimental.grounding_layers`."""
        return self.experimental.grounding_layers

    @property
    def sparsify_threshold(self) -> Any:
        """`experimental.sparsify_threshold`."""
        return self.experimental.sparsify_threshold

    @property
    def rollout_residual(self) -> Any:
        """`experimental.rollout_residual`."""
        return self.experimental.rollout_residual

    @property
    def selector(self) -> Any:
        """`experimental.selector`."""
        return self.experimental.selector

    @property
    def sentence_transformer(self) -> Any:
        """`experimental.sentence_transformer`."""
        return self.experimental.sentence_transformer

    @property
    def scoring_model(self) -> Any:
        """`experimental.scoring_model`."""
        return self.experimental.scoring_model

    @property
    def typical_eps(self) -> Any:
        """`experimental.typical_eps`."""
        return self.experimental.typical_eps

    @property
    def typical_delta(self) -> Any:
        """`experimental.typical_delta`."""
        return self.experimental.typical_delta

    @property
    def check_below(self) -> Any:
        """`experimental.check_below`."""
        return self.experimental.check_below

    @property
    def check_run_below(self) -> Any:
        """`experimental.check_run_below`."""
        return self.experimental.check_run_below

    @property
    def fallback_acceptance(self) -> Any:
        """`experimental.fallback_acceptance`."""
        return self.experimental.fallback_acceptance

    @property
    def sd_draft_tokens(self) -> Any:
        """`experimental.sd_draft_tokens`."""
        return self.experimental.sd_draft_tokens

    @property
    def sd_max_draft_tokens(self) -> Any:
        """`experimental.sd_max_draft_tokens`."""
        return self.experimental.sd_max_draft_tokens

    @property
    def sd_confidence(self) -> Any:
        """`experimental.sd_confidence`."""
        return self.experimental.sd_confidence

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
        base = self.model_dump()
        if "tau" in overrides:  # tau alone means the two-way rule at tau: both thresholds follow it
            base.update(tau_accept=None, tau_reject=None, route="score")
        if "experimental" in overrides:  # a partial experimental config changes only what it names
            extra = overrides.pop("experimental")
            extra = extra.model_dump() if isinstance(extra, BaseModel) else dict(extra)
            base["experimental"] = {**base["experimental"], **extra}
        return SpecGuardConfig.model_validate({**base, **overrides})


class EngineConfig(BaseModel):
    """How the engine wires its pair; fixed at construction, not changeable per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    heterogeneous: bool = Field(False, description="draft and target have different tokenizers; "
                                "steps cross between them as text")
    batching: bool = Field(False, description="concurrent requests share forwards: each model "
                           "forward of every active request waits for a scheduling round, which runs "
                           "the waiting calls as one padded forward per model (concurrency/batcher.py); "
                           "off: requests take turns step by step")
    max_batch_rows: int = Field(16, ge=1, description="batching: most request rows in one forward "
                                "(more waiting rows run as further forwards of the same round)")
    max_active_requests: int = Field(16, ge=1, description="batching: most requests admitted at "
                                     "once (their KV caches are held); later ones wait in order")
    batch_window_s: float = Field(0.05, ge=0, description="batching: a round runs when every "
                                  "request inside a step waits for a forward, or when the engine "
                                  "has been idle this many seconds with forwards waiting")


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
    # run falls below 0.7. Why each value: docs/decisions/.
    "balanced": dict(k=1, temperature=0.0, beta=1.0, tau=0.7, route="check", acceptance="exact",
                     typical_ratio=0.3, experimental=dict(typical_eps=0.03, typical_delta=0.1),
                     check_tokens=16, fallback="speculative", fallback_k=1, sd_run_confidence=0.7),
    # latency-first: draft steps the verifier is confident in are kept without the target (the
    # learned card's P(correct) >= 0.87, its 95%-precision threshold on human-labelled steps; where
    # no card ships for the draft, the paper's confidence-only r), the rest go through the
    # speculative fallback (never slower than the target writing the step)
    "fast": dict(k=1, temperature=0.0, beta=1.0, verifier="auto", tau=0.87, fallback="speculative",
                 fallback_k=1),
}


def override_names() -> frozenset[str]:
    """Every name `SpecGuardConfig.merged` takes: the fields, and the experimental knobs by their
    old top-level names (deprecated aliases)."""
    return frozenset(SpecGuardConfig.model_fields) | EXPERIMENTAL


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


_SPECIAL_FLOATS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


def positive_int(text: str) -> int:
    """An argparse `type` for a count of at least 1 (a one-line usage error otherwise)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def parse_value(text: str) -> Any:
    """A `--set` value: JSON (`4`, `0.6`, `true`, `["\\n\\n"]`), `inf`/`-inf`, else the string."""
    if text.strip().lower() in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text.strip().lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`["k=4", "fast.tau=0.6"]` -> `{"k": 4, "fast.tau": 0.6}`, validated: keys must be
    SpecGuardConfig fields (optionally scoped `<preset>.<field>`) and the values must pass the
    config's validation. Raises ValueError with the offending item."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key = key.strip()
        if key.startswith("experimental."):  # experimental.NAME: the knob by its new place
            key = key.removeprefix("experimental.")
        scope, _, name = key.rpartition(".")
        if scope and scope not in PRESETS:
            raise ValueError(f"--set {item!r}: unknown preset {scope!r}; use {sorted(PRESETS)}")
        if name not in override_names():
            raise ValueError(f"--set {item!r}: {name!r} is not a SpecGuardConfig field")
        value = parse_value(raw)
        if isinstance(value, list):
            value = tuple(value)
        try:
            SpecGuardConfig().merged(**({"experimental": {name: value}} if name in EXPERIMENTAL
                                        else {name: value}))
        except ValueError as err:
            raise ValueError(f"--set {item!r}: {err}") from None
        out[key] = value
    return out
