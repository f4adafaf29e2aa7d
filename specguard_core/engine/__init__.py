"""The algorithm: pure maths and text (`signals`, `steps`, `chat`), model handles and caches
(`capture`, `handle`), the phases (`proposer`, `selector`, `verifier`), per-request bookkeeping
(`request`) and the step loop (`loop`: `SpecGuardEngine`). `aio` bridges streams to asyncio.

`SpecGuardEngine` and `GenerationStream` are exported lazily (importing `engine.steps` alone does
not load torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine

__all__ = ["GenerationStream", "SpecGuardEngine"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from specguard_core.engine import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'specguard_core.engine' has no attribute {name!r}")
