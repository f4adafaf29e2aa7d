"""The engine a `SpecGuardLLM` runs on.

`EngineOwner` is mixed into `SpecGuardLLM` (`llm`, which declares the fields it reads): the engine
passed to the constructor, or the draft/target pair loaded once on first use (thread-safe) with
the loader options; and the pair's context window and name, which `metadata` reports without
loading it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specguard_core.config import EngineConfig, SpecGuardConfig
from specguard_core.models.options import LoadOptions
from specguard_integrations.common import base_config, context_window, load_options, load_pair

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine


class EngineOwner:
    """`engine` (given, or loaded on first use), the loader options and the pair's facts."""

    if TYPE_CHECKING:  # fields and private attributes of SpecGuardLLM
        draft: str | None
        target: str | None
        config: SpecGuardConfig | None
        preset: str | None
        engine_config: EngineConfig | None
        _engine: Any
        _load_lock: Any

    @property
    def engine(self) -> SpecGuardEngine:
        """The engine; loaded on first use when only model names were given (thread-safe)."""
        if self._engine is None:
            with self._load_lock:
                if self._engine is None:
                    base = base_config(self.config, self.preset, None)
                    self._engine = load_pair(str(self.draft), str(self.target), base,
                                             self.loading, self.engine_config)
        return self._engine

    @property
    def loading(self) -> LoadOptions:
        """The loader options: `load_options`, else the separate loader fields given."""
        return load_options(self, "SpecGuardLLM")

    def _pair_facts(self) -> tuple[int | None, str]:
        """The context window and model name: the loaded engine's, else (without loading) the
        smaller `max_position_embeddings` of the pair's local config.json files (None when neither
        has one) and "specguard:DRAFT+TARGET"."""
        engine = self._engine
        if engine is not None:
            return engine.context_window, engine.model_name
        revision = self.loading.revision
        windows = [w for w in (context_window(str(self.draft), revision),
                               context_window(str(self.target), revision)) if w]
        return min(windows, default=None), f"specguard:{self.draft}+{self.target}"
