"""The `specguard` request extension (`extra_body={"specguard": {...}}`): the sampling and
algorithm knobs of `SpecGuardConfig` a remote client may set, and the operator's `Limits` on them.

A client never sets a path, a model name or a loader option: `verifier` is "auto", "paper" or the
name of a card in the operator's `--verifier-dir`; `selector`/`sentence_transformer` (a model to
load) are not knobs here. Anything else is a 400 before the request is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specguard.serve.api.untrusted import card_names, card_path
from specguard_core.config import NormBounds

MAX_STOPS = 16  # stop strings per request, each at most 256 characters
MAX_DELIMITERS = 8  # step delimiters per request, each at most 32 characters


@dataclass(frozen=True)
class Limits:
    """The operator's bounds on what a client may send and ask for (`specguard serve` flags)."""

    max_k: int = 8  # k and fallback_k at most this (each candidate holds a KV cache)
    # max_tokens, max_new_tokens, max_step_tokens, max_steps at most this, and a request that sets
    # no max_tokens gets at most this many; None: no cap but the context window
    max_tokens: int | None = None
    verifier_dir: Path | None = None  # folder of the verifier cards a client may name; None: none
    max_body_bytes: int = 8 << 20  # the largest request body, refused before it is parsed

    def __post_init__(self) -> None:
        if min(self.max_k, self.max_tokens or 1, self.max_body_bytes) < 1:
            raise ValueError("max_k, max_tokens and max_body_bytes must be >= 1")


class ExperimentalKnobs(BaseModel):
    """The experimental knobs a client may set (`ExperimentalConfig` less `selector` and
    `sentence_transformer`, which name a model to load). Values are checked by the config."""

    model_config = ConfigDict(extra="forbid")

    grounding_layers: int | None = Field(None, ge=1, le=64, description="last layers the rollout "
                                         "reads")
    sparsify_threshold: float | None = Field(None, description="attention weights dropped below")
    rollout_residual: bool | None = Field(None, description="add the residual to the rollout")
    scoring_model: Literal["draft", "target"] | None = Field(None, description="whose internals "
                                                             "the verifier reads")
    check_below: float | None = Field(None, description="check after a draft token below this")
    fallback_acceptance: Literal["exact", "typical"] | None = Field(
        None, description="speculative fallback's greedy acceptance")
    sd_draft_tokens: int | None = Field(None, ge=1, le=64, description="speculative fallback: "
                                        "first draft run length")
    sd_max_draft_tokens: int | None = Field(None, ge=1, le=64, description="speculative "
                                            "fallback: longest draft run")
    sd_confidence: float | None = Field(None, description="speculative fallback: end a run "
                                        "after a token below this")


class SpecGuardExtension(BaseModel):
    """`extra_body={"specguard": {...}}`: the `SpecGuardConfig` knobs a client may set (see that
    class for what each does). Unset (None) keeps the server's value. Paths, model names and
    loader options are the operator's (`specguard serve --set`), not a request's."""

    model_config = ConfigDict(extra="forbid")

    # sampling (also top-level OpenAI fields: set a knob in one place, or to one value)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 means greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling")
    top_k: int | None = Field(None, ge=-1, description="the k most likely tokens (0 or -1: all)")
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="min-p sampling")
    repetition_penalty: float | None = Field(None, gt=0.0, description="1: none")
    seed: int | None = Field(None, ge=0, lt=2**64, description="the request's random seed")
    stop: str | list[str] | None = Field(None, description="strings that end generation")
    max_new_tokens: int | None = Field(None, ge=1, description="the answer's token budget "
                                       "(at most Limits.max_tokens)")
    response_format_mode: Literal["constrain", "check"] | None = Field(
        None, description="how a JSON response_format is enforced: 'constrain' (by the grammar) "
        "or 'check' (answer steps checked, no guarantee)")
    # the algorithm
    k: int | None = Field(None, ge=1, description="draft candidates per step (at most "
                          "Limits.max_k)")
    max_steps: int | None = Field(None, ge=1, description="the answer's step budget")
    max_step_tokens: int | None = Field(None, ge=1, description="a step ends after this many "
                                        "tokens")
    step_delimiters: list[str] | None = Field(None, description="a step ends after one of these")
    beta: float | None = Field(None, description="weight of confidence in the ensemble")
    tau: float | None = Field(None, description="accept iff score >= tau")
    tau_accept: float | None = Field(None, description="keep without the target iff r >= this")
    tau_reject: float | None = Field(None, description="straight to the fallback iff r < this")
    bounds: NormBounds | None = Field(None, description="the paper verifier's min-max bounds")
    verifier: str | None = Field(None, description="'auto', 'paper', or the name of a card in "
                                 "the operator's Limits.verifier_dir")
    route: Literal["score", "check"] | None = Field(None, description="how a step is routed")
    acceptance: str | None = Field(None, description="the token rule the target's check judges "
                                   "by: typical, exact, exact-numbers, vouched")
    action_acceptance: Literal["exact", "typical"] | None = Field(None, description="how the "
                                                                  "check judges actions")
    fallback: Literal["greedy", "sample", "speculative"] | None = Field(
        None, description="who writes a rejected step")
    fallback_k: int | None = Field(None, ge=1, description="fallback samples (at most "
                                   "Limits.max_k)")
    typical_eps: float | None = Field(None, description="typical acceptance: Medusa's epsilon")
    typical_delta: float | None = Field(None, description="typical acceptance: Medusa's delta")
    typical_ratio: float | None = Field(None, description="target check: ratio to the top token")
    check_tokens: int | None = Field(None, ge=0, le=256, description="check while the draft "
                                     "writes, every this many tokens")
    check_run_below: float | None = Field(None, description="check once the run's product falls "
                                          "below this")
    draft_lookahead: int | None = Field(None, ge=0, le=64, description="prompt-lookup guesses per "
                                        "draft forward")

    sd_run_confidence: float | None = Field(None, description="speculative fallback: end a run "
                                            "below this product")
    experimental: ExperimentalKnobs | None = Field(None, description="experimental knobs")

    def problems(self, limits: Limits) -> list[str]:
        """Why these knobs exceed the operator's `limits` (or name an unknown card)."""
        bad = []
        for name in ("k", "fallback_k"):
            if (value := getattr(self, name)) is not None and value > limits.max_k:
                bad.append(f"specguard.{name} must be <= {limits.max_k} on this server "
                           "(`specguard serve --max-k`)")
        for name in ("max_new_tokens", "max_steps", "max_step_tokens"):
            if (value := getattr(self, name)) is not None and limits.max_tokens is not None \
                    and value > limits.max_tokens:
                bad.append(f"specguard.{name} must be <= {limits.max_tokens} on this server "
                           "(`specguard serve --max-tokens-cap`)")
        stops = (self.stop,) if isinstance(self.stop, str) else self.stop or ()
        if not stops_ok(stops):
            bad.append(f"specguard.stop takes 1 to {MAX_STOPS} non-empty strings of at most 256 "
                       "characters")
        if self.step_delimiters is not None and (
                not 0 < len(self.step_delimiters) <= MAX_DELIMITERS
                or any(not 0 < len(d) <= 32 for d in self.step_delimiters)):
            bad.append(f"specguard.step_delimiters must be 1 to {MAX_DELIMITERS} strings of 1 to "
                       "32 characters")
        if self.verifier not in (None, "auto", "paper") and \
                card_path(self.verifier, limits.verifier_dir) is None:
            names = card_names(limits.verifier_dir)
            have = f"; cards here: {', '.join(names)}" if names else \
                " (this server offers no cards: `specguard serve --verifier-dir`)"
            bad.append("specguard.verifier must be 'auto', 'paper' or the name of a verifier card "
                       f"in the server's --verifier-dir{have}")
        return bad

    def knobs(self) -> dict[str, Any]:
        """The set knobs as `SpecGuardConfig.merged` overrides, the verifier as sent."""
        out = self.model_dump(exclude_none=True)
        if "stop" in out:
            out["stop"] = (out["stop"],) if isinstance(out["stop"], str) else tuple(out["stop"])
        if "step_delimiters" in out:
            out["step_delimiters"] = tuple(out["step_delimiters"])
        return out

    def overrides(self, limits: Limits) -> dict[str, Any]:
        """`knobs()` with a card name as its path in the operator's folder (ValueError if there
        is none: `problems` says so first)."""
        out = self.knobs()
        if self.verifier not in (None, "auto", "paper"):
            path = card_path(self.verifier, limits.verifier_dir)
            if path is None:
                raise ValueError("specguard.verifier names no card of this server")
            out["verifier"] = str(path)
        return out


def stops_ok(stops: tuple[str, ...] | list[str]) -> bool:
    return len(stops) <= MAX_STOPS and all(0 < len(s) <= 256 for s in stops)


def validation_text(err: ValidationError) -> str:
    """A ValidationError's messages without the input values it quotes."""
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg')}"
                     for e in err.errors()[:3])
