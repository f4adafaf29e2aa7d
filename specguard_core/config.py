"""Typed configuration: `SpecGuardConfig` (per request: every knob of the algorithm), `EngineConfig`
(per engine: how the pair is wired), `NormBounds`, and the presets.

As nano-vllm keeps `Config` apart from `SamplingParams`: a request can change any `SpecGuardConfig`
field (`engine.generate(..., config=cfg)` or `engine.generate(..., k=4)`), never an engine field.
Both are immutable; `config.merged(**overrides)` returns a validated copy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class NormBounds(BaseModel):
    """Min-max bounds that map the raw signals to [0, 1] (values outside are clipped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence_min: float = -8.0
    confidence_max: float = 0.0
    grounding_min: float = 0.0
    grounding_max: float = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> NormBounds:
        if not self.confidence_min < self.confidence_max:
            raise ValueError("confidence_min must be < confidence_max")
        if not self.grounding_min < self.grounding_max:
            raise ValueError("grounding_min must be < grounding_max")
        return self

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.model_dump(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> NormBounds:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(
                f"bounds file {path} not found; create it with `specguard calibrate`"
            ) from None
        return cls.model_validate(data.get("bounds", data))


class SpecGuardConfig(BaseModel):
    """The algorithm's configuration (DESIGN.md section 2; paper defaults noted in `paper`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # propose
    k: int = Field(4, ge=1, le=64, description="draft candidates per step")
    temperature: float = Field(0.7, ge=0.0, description="0 means greedy")
    top_p: float = Field(0.8, gt=0.0, le=1.0)
    step_delimiters: tuple[str, ...] = ("\n\n",)
    max_step_tokens: int = Field(256, ge=1)
    # score and decide
    beta: float = Field(0.3, ge=0.0, le=1.0, description="weight of confidence in the ensemble")
    tau: float = Field(0.7, description="accept iff score >= tau; -inf always, +inf never")
    bounds: NormBounds = NormBounds()
    grounding_layers: int = Field(3, ge=1, description="last layers used by the rollout")
    sparsify_threshold: float = Field(0.01, ge=0.0, lt=1.0)
    rollout_residual: bool = False
    selector: Literal["hidden", "sentence-transformer"] = "hidden"
    sentence_transformer: str | None = None
    scoring_model: Literal["draft", "target"] = "draft"
    verifier: str = Field("paper", min_length=1, description="'paper' (the beta ensemble of l and "
                          "g) or the path of a verifier card from `specguard verifier-train` "
                          "(then the score is the probe's P(step correct))")
    # fall back
    fallback: Literal["greedy", "sample"] = "greedy"
    fallback_k: int = Field(1, ge=1, le=64)
    # stop
    max_new_tokens: int = Field(512, ge=1)
    max_steps: int = Field(64, ge=1)
    stop: tuple[str, ...] = ()
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> SpecGuardConfig:
        if not self.step_delimiters or any(not d for d in self.step_delimiters):
            raise ValueError("step_delimiters must be non-empty strings")
        if math.isnan(self.tau):
            raise ValueError("tau must be a number (use inf/-inf to always reject/accept)")
        if self.selector == "sentence-transformer" and not self.sentence_transformer:
            raise ValueError("selector='sentence-transformer' needs sentence_transformer=<path>")
        return self

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
        unknown = sorted(set(overrides) - set(SpecGuardConfig.model_fields))
        if unknown:
            raise ValueError(f"unknown SpecGuardConfig field(s) {unknown}; valid: "
                             f"{sorted(SpecGuardConfig.model_fields)}")
        return SpecGuardConfig.model_validate({**self.model_dump(), **overrides})


class EngineConfig(BaseModel):
    """How the engine wires its pair; fixed at construction, not changeable per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    heterogeneous: bool = Field(False, description="draft and target have different tokenizers; "
                                "steps cross between them as text")


PRESETS: dict[str, dict[str, Any]] = {
    # the paper's settings (arXiv 2604.15244): k=16, T=0.7, top_p=0.8, beta=0.3, tau=0.7,
    # k-sample target fallback with the same selector
    "paper": dict(k=16, temperature=0.7, top_p=0.8, beta=0.3, tau=0.7, fallback="sample",
                  fallback_k=16),
    # latency-first: few candidates, greedy single-sample target fallback
    "fast": dict(k=2, temperature=0.7, top_p=0.8, beta=0.3, tau=0.6, fallback="greedy",
                 fallback_k=1),
}


def preset(name: str, **overrides: Any) -> SpecGuardConfig:
    """The named preset (`paper` or `fast`) with overrides applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return SpecGuardConfig().merged(**{**PRESETS[name], **overrides})


_SPECIAL_FLOATS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


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
        scope, _, name = key.rpartition(".")
        if scope and scope not in PRESETS:
            raise ValueError(f"--set {item!r}: unknown preset {scope!r}; use {sorted(PRESETS)}")
        if name not in SpecGuardConfig.model_fields:
            raise ValueError(f"--set {item!r}: {name!r} is not a SpecGuardConfig field")
        value = parse_value(raw)
        if isinstance(value, list):
            value = tuple(value)
        try:
            SpecGuardConfig().merged(**{name: value})
        except ValueError as err:
            raise ValueError(f"--set {item!r}: {err}") from None
        out[key] = value
    return out
