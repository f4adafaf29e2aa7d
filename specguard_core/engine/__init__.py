"""The algorithm: the step loop (`loop`: `SpecGuardEngine`), a request's start and one step of it
(`run/`), its plan (`plan`: which path its steps take, decided once) and per-request state
(`request`), the draft's proposal (`proposer`, over the types and the sampling in `decoding/`) and
the choice among candidates (`selector`), the target's check of a draft step (`accept`: the token
rules; `check`: one pass, grown while the draft writes or once over the whole step), speculative
decoding's token maths (`speculative`), the target's fallback (`fallback`), the verifier's glue
(`judge`, over `verify/`), the step stream (`stream`) and its asyncio bridge (`aio`).

`SpecGuardEngine` and `GenerationStream` are exported lazily (importing a module of the package
alone does not load the engine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.engine.stream import GenerationStream

__all__ = ["GenerationStream", "SpecGuardEngine"]


def __getattr__(name: str) -> Any:
    if name == "SpecGuardEngine":
        from specguard_core.engine.loop import SpecGuardEngine

        return SpecGuardEngine
    if name == "GenerationStream":
        from specguard_core.engine.stream import GenerationStream

        return GenerationStream
    raise AttributeError(f"module 'specguard_core.engine' has no attribute {name!r}")
