"""SpecGuard core: step-level speculative reasoning with model-internal verification.

Folders by concern, nothing imports upward: `config`, `types` -> `text/` (steps, chat, formats,
schema; torch-free) and `models/` (registry, fetch, loading: where weights come from) ->
`concurrency/` (turns, the CPU runner, batching) -> `cache/` (model handles, KV caches, the
`Target` protocol) -> `decoding/` (sampling, a proposal's data) -> `remote/` (a target on a vLLM
server) -> `engine/` (the algorithm, with `engine/verify/`: signals, verifiers, cards) ->
`testing` (scripted stand-in models).
Names are exported lazily, so importing the package (or running `specguard --help`) does not
load torch or transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EngineConfig": "specguard_core.config",
    "NormBounds": "specguard_core.config",
    "SpecGuardConfig": "specguard_core.config",
    "preset": "specguard_core.config",
    "GenerationResult": "specguard_core.types",
    "PromptLogprobs": "specguard_core.types",
    "RawPrompt": "specguard_core.text.messages",
    "StepRecord": "specguard_core.types",
    "ToolCall": "specguard_core.types",
    "GenerationStream": "specguard_core.engine.stream",
    "ModelLoadError": "specguard_core.models.loading",
    "LoadOptions": "specguard_core.models.options",
    "SpecGuardEngine": "specguard_core.engine.loop",
    "RemoteTarget": "specguard_core.remote.target",
    "RemoteTargetError": "specguard_core.remote.http",
}
__all__ = [
    "EngineConfig",
    "GenerationResult",
    "GenerationStream",
    "LoadOptions",
    "ModelLoadError",
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

if TYPE_CHECKING:
    from specguard_core.config import EngineConfig, NormBounds, SpecGuardConfig, preset
    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.engine.stream import GenerationStream
    from specguard_core.models.loading import ModelLoadError
    from specguard_core.models.options import LoadOptions
    from specguard_core.remote.http import RemoteTargetError
    from specguard_core.remote.target import RemoteTarget
    from specguard_core.text.messages import RawPrompt
    from specguard_core.types import GenerationResult, PromptLogprobs, StepRecord, ToolCall


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("specguard")
        except PackageNotFoundError:
            return "0+unknown"
    if name not in _EXPORTS:
        raise AttributeError(f"module 'specguard_core' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
