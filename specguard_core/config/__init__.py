"""Typed configuration: `SpecGuardConfig` (per request: every knob of the algorithm), `EngineConfig`
(per engine: how the pair is wired), `NormBounds`, and the presets.

As nano-vllm keeps `Config` apart from `SamplingParams`: a request can change any `SpecGuardConfig`
field (`engine.generate(..., config=cfg)` or `engine.generate(..., k=4)`), never an engine field.
Both are immutable; `config.merged(**overrides)` returns a validated copy.

By concern: `bounds` (`NormBounds`), `experimental` (`ExperimentalConfig`: knobs measured and
not adopted), `request` (`SpecGuardConfig`), `engine_config` (`EngineConfig`), `presets` (`PRESETS`,
`preset`, `default_config`) and `overrides` (the override names and `--set` parsing). Every name is
importable from `specguard_core.config` itself; none of these modules loads torch.
"""

from __future__ import annotations

from specguard_core.config.bounds import NormBounds
from specguard_core.config.engine_config import EngineConfig
from specguard_core.config.experimental import EXPERIMENTAL, ExperimentalConfig
from specguard_core.config.overrides import override_names, parse_sets, parse_value, positive_int
from specguard_core.config.presets import DEFAULT_PRESET, PRESETS, default_config, preset
from specguard_core.config.request import SpecGuardConfig

__all__ = [
    "DEFAULT_PRESET", "EXPERIMENTAL", "PRESETS", "EngineConfig", "ExperimentalConfig",
    "NormBounds", "SpecGuardConfig", "default_config", "override_names", "parse_sets",
    "parse_value", "positive_int", "preset",
]
