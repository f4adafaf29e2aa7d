"""SpecGuard core: step-level speculative reasoning with model-internal verification."""

from specguard_core.config import NormBounds, SpecGuardConfig, preset
from specguard_core.engine import GenerationStream, SpecGuardEngine
from specguard_core.types import GenerationResult, StepRecord, ToolCall

__all__ = [
    "GenerationResult",
    "GenerationStream",
    "NormBounds",
    "SpecGuardConfig",
    "SpecGuardEngine",
    "StepRecord",
    "ToolCall",
    "preset",
]
__version__ = "0.1.0"
