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
    """Every name `SpecGuardConfig.merged` takes: its fields (experimental knobs go in the
    `experimental` one)."""
    return frozenset(SpecGuardConfig.model_fields)


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
    """`["k=4", "fast.tau=0.6", "experimental.check_below=0.2"]` -> `{"k": 4, "fast.tau": 0.6,
    "experimental": {"check_below": 0.2}}`, validated: keys must be SpecGuardConfig fields or
    `experimental.<knob>`, optionally scoped `<preset>.` (`fast.experimental` then holds that
    preset's experimental knobs), and the values must pass the config's validation. Raises
    ValueError with the offending item."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        parts = key.strip().split(".")
        scope = parts.pop(0) if len(parts) > 1 and parts[0] in PRESETS else ""
        nested = len(parts) == 2 and parts[0] == "experimental"
        name = parts[-1]
        if len(parts) > 1 and not nested:
            raise ValueError(f"--set {item!r}: unknown preset {parts[0]!r}; use {sorted(PRESETS)}")
        if name not in (EXPERIMENTAL if nested else override_names()):
            where = "an experimental knob" if nested else "a SpecGuardConfig field"
            raise ValueError(f"--set {item!r}: {name!r} is not {where}")
        value = parse_value(raw)
        if isinstance(value, list):
            value = tuple(value)
        try:
            SpecGuardConfig().merged(**({"experimental": {name: value}} if nested
                                        else {name: value}))
        except ValueError as err:
            raise ValueError(f"--set {item!r}: {err}") from None
        if nested:
            group = f"{scope}.experimental" if scope else "experimental"
            out[group] = {**out.get(group, {}), name: value}
        else:
            out[f"{scope}.{name}" if scope else name] = value
    return out
