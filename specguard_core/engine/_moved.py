"""Old import paths of modules that moved out of `specguard_core.engine`, kept for one release.

`import specguard_core.engine.handle` (or `from specguard_core.engine import handle`) gives the
module at its new path, `specguard_core.cache.handle`, with a `DeprecationWarning` naming it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

PACKAGE = "specguard_core.engine"
MOVED = {
    "steps": "specguard_core.text.steps", "chat": "specguard_core.text.chat",
    "formats": "specguard_core.text.formats", "schema": "specguard_core.text.schema",
    "turns": "specguard_core.concurrency.turns", "threads": "specguard_core.concurrency.cpu_runner",
    "scheduler": "specguard_core.concurrency.batcher", "rounds": "specguard_core.concurrency.rounds",
    "batch": "specguard_core.concurrency.padded", "capture": "specguard_core.cache.capture",
    "handle": "specguard_core.cache.handle", "target": "specguard_core.cache.state",
    "remote": "specguard_core.remote.target", "remote_http": "specguard_core.remote.http",
    "remote_load": "specguard_core.remote.load", "signals": "specguard_core.engine.verify.signals",
    "verifier": "specguard_core.engine.verify.verifier", "probe": "specguard_core.engine.verify.cards",
    "sampling": "specguard_core.decoding.sampling",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release",
                  DeprecationWarning, stacklevel=3)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        head, _, name = fullname.rpartition(".")
        if head != PACKAGE or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        new = MOVED[spec.name.rpartition(".")[2]]
        _warn(spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        return None


def install() -> None:
    """Put the alias finder on `sys.meta_path` once."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def attribute(name: str) -> ModuleType:
    """`specguard_core.engine.<old name>` as an attribute: the moved module, with a warning."""
    if name not in MOVED:
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
    _warn(f"{PACKAGE}.{name}", MOVED[name])
    return importlib.import_module(MOVED[name])
