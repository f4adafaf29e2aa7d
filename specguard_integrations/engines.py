"""The engine an adapter runs on, framework-free: the loader options, the process-wide registry
of loaded pairs, and `EngineOwner`, which both adapters mix in.

An adapter given a ready engine (`engine=`) runs on it. Otherwise it takes, when it is built, the
`Pair` for its loader options (draft, target, `LoadOptions`, `EngineConfig`) from `PAIRS`, and the
pair loads on first use. Every adapter built from the same loader options, in either framework,
holds the same `Pair`, so the weights load once: models rebuilt per call (LangChain's
`configurable_fields`, say) or built side by side never load them again. The registry holds each
`Pair` by weak reference only, so a pair that no adapter holds any more is freed.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from specguard_core.config import EngineConfig, SpecGuardConfig
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_integrations.common import context_window
from specguard_integrations.fields import LOADER_OPTIONS

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine


def _plain(value: Any) -> Any:
    """A loader option as JSON holds it alike whenever it is alike: a mapping with text keys
    (`max_memory` mixes GPU numbers and "cpu"), a secret by its value, any other object by its
    repr (a quantization config's repr is its settings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


def pair_key(draft: str, target: str, load: LoadOptions, engine_config: EngineConfig | None) -> str:
    """What identifies a loaded pair: a digest of the names and every loader option (a secret
    enters the digest, never the key itself)."""
    fields = {"draft": draft, "target": target,
              "load": {name: getattr(load, name) for name in LoadOptions.model_fields},
              "engine": (engine_config or EngineConfig()).model_dump()}
    return hashlib.sha256(json.dumps(_plain(fields), sort_keys=True).encode()).hexdigest()


class Pair:
    """One draft/target pair, loaded on first use (once, thread-safe) and held while any adapter
    holds this object."""

    def __init__(self, draft: str, target: str, load: LoadOptions,
                 engine_config: EngineConfig | None) -> None:
        self.draft, self.target, self.load, self.engine_config = draft, target, load, engine_config
        self.loaded: SpecGuardEngine | None = None  # None until the first use
        self._lock = threading.Lock()

    @property
    def engine(self) -> SpecGuardEngine:
        if self.loaded is None:
            with self._lock:
                if self.loaded is None:
                    from specguard_core.engine.loop import SpecGuardEngine

                    self.loaded = SpecGuardEngine.from_pretrained(
                        self.draft, self.target, load=self.load, engine_config=self.engine_config)
        return self.loaded


class LoadedPairs:
    """The `Pair` of each set of loader options (by `pair_key`), held by weak reference."""

    def __init__(self) -> None:
        self._pairs: weakref.WeakValueDictionary[str, Pair] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def pair(self, draft: str, target: str, load: LoadOptions,
             engine_config: EngineConfig | None) -> Pair:
        """The pair for these loader options: the one an adapter already holds, else a new one
        (not loaded yet)."""
        key = pair_key(draft, target, load, engine_config)
        with self._guard:
            pair = self._pairs.get(key)
            if pair is None:
                pair = self._pairs[key] = Pair(draft, target, load, engine_config)
            return pair

    def __len__(self) -> int:
        return len(self._pairs)


PAIRS = LoadedPairs()  # the process's loaded pairs, shared by both adapters


def load_options(owner: Any, name: str) -> LoadOptions:
    """The adapter's loader options: its `load_options`, else its separate loader fields (those
    that differ from their defaults); both is a ValueError, and so is a bad value (naming the
    option)."""
    fields = type(owner).model_fields
    given = {n: getattr(owner, n) for n in LOADER_OPTIONS
             if getattr(owner, n) != fields[n].get_default(call_default_factory=True)}
    if owner.load_options is not None:
        if given:
            raise ValueError(f"{name} got load_options= and {sorted(given)}; pass the loader "
                             f"options one way (load_options=LoadOptions({sorted(given)[0]}=...))")
        return owner.load_options
    try:
        return LoadOptions.of(**given)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def check_placement(name: str, load: LoadOptions, target: str | None) -> None:
    """The devices the adapter would load on, checked at construction (naming the option); a
    served `target` (a URL) takes no target placement options."""
    from specguard_core.models.loading import model_options
    from specguard_core.remote.load import draft_options, is_url

    try:
        if target is not None and is_url(target):
            draft_options(load)
        else:
            model_options(load, "draft")
            model_options(load, "target")
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


class EngineOwner:
    """`engine` (given, or the shared `Pair` loaded on first use), the loader options, and the
    pair's context window and name without loading it. Mixed into both adapters, which declare
    the fields it reads and the private `_engine` (a given engine) and `_pair` (else the pair,
    taken from `PAIRS` by `_take_pair` when the adapter is built)."""

    if TYPE_CHECKING:  # fields and private attributes of ChatSpecGuard and SpecGuardLLM
        draft: str | None
        config: SpecGuardConfig | None
        preset: str | None
        engine_config: EngineConfig | None
        _engine: SpecGuardEngine | None
        _pair: Pair | None

        @property
        def target(self) -> str | None: ...

    @property
    def loading(self) -> LoadOptions:
        """The loader options: `load_options`, else the separate loader fields given."""
        return load_options(self, type(self).__name__)

    def _take_pair(self) -> None:
        """Hold the shared pair of this adapter's loader options (none when given an engine)."""
        if self._engine is None:
            self._pair = PAIRS.pair(self.draft or DEFAULT_DRAFT, self.target or DEFAULT_TARGET,
                                    self.loading, self.engine_config)

    @property
    def engine(self) -> SpecGuardEngine:
        """The given engine, or the shared pair, loaded on first use (once per process for the
        same loader options, thread-safe)."""
        if self._engine is not None:
            return self._engine
        assert self._pair is not None, "an adapter takes its pair when it is built"
        return self._pair.engine

    def _ready_engine(self) -> SpecGuardEngine | None:
        """The engine if it is here without loading anything (given, or already loaded)."""
        return self._engine if self._pair is None else self._pair.loaded

    def _pair_facts(self) -> tuple[int | None, str]:
        """The context window and model name: the engine's, else (without loading) the smaller
        `max_position_embeddings` of the pair's local config.json files (None when neither has
        one) and "specguard:DRAFT+TARGET"."""
        engine = self._ready_engine()
        if engine is not None:
            return engine.context_window, engine.model_name
        draft, target = self.draft or DEFAULT_DRAFT, self.target or DEFAULT_TARGET
        revision = self.loading.revision
        windows = [w for w in (context_window(draft, revision), context_window(target, revision))
                   if w]
        return min(windows, default=None), f"specguard:{draft}+{target}"
