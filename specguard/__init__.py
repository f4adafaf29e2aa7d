"""SpecGuard: step-level speculative reasoning with model-internal verification.

The one entry point of the distribution: `import specguard` gives the engine's public API
(`specguard.SpecGuardEngine`, `specguard.preset`, ...), loaded lazily; the adapters live in
`specguard_integrations`, the benchmark in `specguard_bench`, and `specguard.cli` is the
`specguard` command above all three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import specguard_core

if TYPE_CHECKING:
    from specguard_core import (
        EngineConfig,
        GenerationResult,
        GenerationStream,
        LoadOptions,
        NormBounds,
        PromptLogprobs,
        RawPrompt,
        RemoteTarget,
        RemoteTargetError,
        SpecGuardConfig,
        SpecGuardEngine,
        StepRecord,
        ToolCall,
        preset,
    )

__all__ = [
    "EngineConfig",
    "GenerationResult",
    "GenerationStream",
    "LoadOptions",
    "NormBounds",
    "PromptLogprobs",
    "RawPrompt",
    "RemoteTarget",
    "RemoteTargetError",
    "SpecGuardConfig",
    "SpecGuardEngine",
    "StepRecord",
    "ToolCall",
    "preset",
]


def __getattr__(name: str) -> Any:
    return getattr(specguard_core, name)
