"""The algorithm: the step loop (`loop`: `SpecGuardEngine`), a request's start and one step of it
(`run/`), its per-request state (`request`), the draft's proposal (`proposer`, over the types and
the sampling in `decoding/`) and the choice among candidates (`selector`), the target's check of a
draft step (`speculative`: acceptance rules; `check`: the check that grows while the draft
writes), the target's fallback (`fallback`), the verifier's glue (`judge`, over `verify/`), the
step stream (`stream`) and its asyncio bridge (`aio`).

`SpecGuardEngine` and `GenerationStream` are exported lazily (importing a module of the package
alone does not load the engine). Modules that moved out of this package keep their old import
path for one release, with a `DeprecationWarning` (`_moved.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specguard_core.engine import _moved

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.engine.stream import GenerationStream

__all__ = ["GenerationStream", "SpecGuardEngine"]
_moved.install()


def __getattr__(name: str) -> Any:
    if name == "SpecGuardEngine":
        from specguard_core.engine.loop import SpecGuardEngine

        return SpecGuardEngine
    if name == "GenerationStream":
        from specguard_core.engine.stream import GenerationStream

        return GenerationStream
    return _moved.attribute(name)
