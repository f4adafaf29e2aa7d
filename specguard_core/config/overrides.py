"""The names a config override may use, and the command line's `--set KEY=VALUE` parsing
(`parse_value`, `parse_sets`) with `positive_int`, the argparse type for counts."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from specguard_core.config.experimental import EXPERIMENTAL
from specguard_core.config.presets import PRESETS
from specguard_core.config.request import SpecGuardConfig


def override_names() -> frozenset[str]:
    """Every name `SpecGuardConfig.merged` takes: the fields, and the experimental knobs by their
    old top-level names (deprecated aliases)."""
    return frozenset(SpecGuardConfig.model_fields) | EXPERIMENTAL


_SPECIAL_FLOATS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf}


def positive_int(text: str) -> int:
    """An argparse `type` for a count of at least 1 (a one-line usage error otherwise)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def parse_value(text: str) -> Any:
    """A `--set` value: JSON (`4`, `0.6`, `true`, `["\\n\\n"]`), `inf`/`-inf`, else the string."""
    if text.strip().lower() in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text.strip().lower()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """`["k=4", "fast.tau=0.6"]` -> `{"k": 4, "fast.tau": 0.6}`, validated: keys must be
    SpecGuardConfig fields (optionally scoped `<preset>.<field>`) and the values must pass the
    config's validation. Raises ValueError with the offending item."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key = key.strip()
        if key.startswith("experimental."):  # experimental.NAME: the knob by its new place
            key = key.removeprefix("experimental.")
        scope, _, name = key.rpartition(".")
        if scope and scope not in PRESETS:
            raise ValueError(f"--set {item!r}: unknown preset {scope!r}; use {sorted(PRESETS)}")
        if name not in override_names():
            raise ValueError(f"--set {item!r}: {name!r} is not a SpecGuardConfig field")
        value = parse_value(raw)
        if isinstance(value, list):
            value = tuple(value)
        try:
            SpecGuardConfig().merged(**({"experimental": {name: value}} if name in EXPERIMENTAL
                                        else {name: value}))
        except ValueError as err:
            raise ValueError(f"--set {item!r}: {err}") from None
        out[key] = value
    return out
