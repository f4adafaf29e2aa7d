"""The engines a benchmark run uses, and the settings that say how to load them.

- `PairSettings`: the in-process draft/target pair (shared by the bench and `calibrate`).
- `ServedTarget`: a target on a vLLM server (`--target-url`); the method `specguard-remote` runs
  the balanced preset on a second engine built around it (`load_engine(settings, served)`: the
  same draft, loaded again), while every other method keeps the in-process pair.
- `Engines`: both, each loaded the first time a method needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specguard_bench.common.methods import REMOTE_METHOD, REMOTE_VARIANT
from specguard_core.config import SpecGuardConfig
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET


@dataclass(frozen=True, kw_only=True)
class PairSettings:
    """The model pair and how to load it, shared by `BenchSettings` and `CalibrateSettings`.
    `sets` are SpecGuardConfig overrides for the SpecGuard methods (`k=4`, or `fast.k=4` for
    one preset). `load` holds the loader options besides `device` and `dtype` (per-model
    placement, revision, quantization, ...; a served target's are `ServedTarget`'s)."""

    draft: str = DEFAULT_DRAFT
    target: str = DEFAULT_TARGET
    device: str = "auto"
    dtype: str = "bfloat16"
    load: LoadOptions = field(default_factory=LoadOptions)
    sets: Mapping[str, Any] = field(default_factory=dict)
    heterogeneous: bool = False  # EngineConfig: a pair with different tokenizers
    batching: bool = False  # EngineConfig: concurrent requests share forwards (concurrency/batcher.py)
    max_batch_rows: int | None = None  # EngineConfig.max_batch_rows with batching (None: default)
    progress: bool = True

    def load_fingerprint(self) -> dict[str, Any]:
        """The loader options set besides device and dtype, as JSON (for a run's fingerprint)."""
        given = {k: getattr(self.load, k) for k in sorted(self.load.model_fields_set)
                 if k not in ("device", "dtype")}
        return {k: v if v is None or isinstance(v, (str, int, float, bool, dict)) else repr(v)
                for k, v in given.items()}


@dataclass(frozen=True)
class ServedTarget:
    """A target on a vLLM server (`--target-url`, `--target-model`, ...), run by the method
    `specguard-remote` beside the in-process pair. `api_key` is not part of the fingerprint."""

    url: str
    model: str | None = None
    tokenizer: str | None = None
    timeout_s: float | None = None
    api_key: str | None = field(default=None, repr=False)
    top_logprobs: int | None = None  # log-probabilities per token the server returns

    @classmethod
    def of(cls, load: LoadOptions) -> ServedTarget | None:
        """The served target `load` names (its `target_url`), else None."""
        if load.target_url is None:
            return None
        given = load.served()
        return cls(url=load.target_url, model=given.get("target_model"),
                   tokenizer=given.get("target_tokenizer"), timeout_s=given.get("target_timeout"),
                   api_key=given.get("target_api_key"),
                   top_logprobs=given.get("target_top_logprobs"))

    def fingerprint(self) -> dict[str, Any]:
        """What changes a `specguard-remote` result: where the target is, which model, its
        tokenizer, and the variant (the preset it runs)."""
        preset, fixed = REMOTE_VARIANT
        return {"url": self.url, "model": self.model, "tokenizer": self.tokenizer,
                "variant": [preset, dict(sorted(fixed.items()))],
                **({"top_logprobs": self.top_logprobs} if self.top_logprobs else {})}

    def options(self) -> dict[str, Any]:
        """`SpecGuardEngine.from_pretrained`'s remote keywords (unset ones left out)."""
        given = {"target_model": self.model, "target_tokenizer": self.tokenizer,
                 "target_timeout": self.timeout_s, "target_api_key": self.api_key,
                 "target_top_logprobs": self.top_logprobs}
        return {k: v for k, v in given.items() if v is not None}


def base_config(sets: Mapping[str, Any]) -> SpecGuardConfig:
    """The engine's default request config: defaults plus the unscoped `--set` overrides."""
    return SpecGuardConfig().merged(**{k: v for k, v in sets.items() if "." not in k})


def load_engine(settings: PairSettings, served: ServedTarget | None = None) -> Any:
    """SpecGuardEngine.from_pretrained for the pair that `settings` name (cached registry names
    resolve offline), with the unscoped `--set` overrides as the engine's config. With `served`
    (the engine of `specguard-remote`): the same draft, loaded again with the same placement and
    config, and the target on the vLLM server `served` names (the server is asked, and its
    tokenizer checked, before the draft loads)."""
    from specguard_core import EngineConfig, SpecGuardEngine

    placement = {} if settings.load.backend == "llama.cpp" else \
        {"device": settings.device, "dtype": settings.dtype}  # llama.cpp runs the GGUF as it is
    return SpecGuardEngine.from_pretrained(
        settings.draft,
        served.url if served else settings.target,
        load=settings.load.in_process().merged(**placement,
                                               **(served.options() if served else {})),
        progress=settings.progress,
        config=base_config(settings.sets),
        engine_config=EngineConfig(heterogeneous=settings.heterogeneous,
                                   batching=settings.batching,
                                   **({"max_batch_rows": settings.max_batch_rows}
                                      if settings.max_batch_rows else {})),
    )


class Engines:
    """The engines of one run, each loaded when a method first needs it: the in-process pair
    (every method but `specguard-remote`) and, with `served`, the engine of the served target.
    `local`/`remote` may be given already built (tests, notebooks)."""

    def __init__(self, settings: PairSettings, served: ServedTarget | None = None, *,
                 local: Any = None, remote: Any = None) -> None:
        self.settings, self.served, self.local, self.remote = settings, served, local, remote

    def for_method(self, method: str) -> Any:
        """The engine that runs `method` (loaded now if it is not yet)."""
        if method == REMOTE_METHOD:
            if self.remote is None:
                if self.served is None:
                    raise ValueError(f"{REMOTE_METHOD} needs a served target (--target-url)")
                self.remote = load_engine(self.settings, self.served)
            return self.remote
        if self.local is None:
            self.local = load_engine(self.settings)
        return self.local

    def any(self) -> Any:
        """An engine that was used (the in-process one first), or None."""
        return self.local if self.local is not None else self.remote
