"""Configuration a caller can get wrong: rejected when the config is built (before any work), with
a message that names the field or file; near-zero temperatures are greedy, as in vLLM."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from specguard_core.config import NormBounds, SpecGuardConfig, parse_sets
from specguard_core.engine.loop import SpecGuardEngine


@pytest.mark.parametrize(("overrides", "match"), [
    ({"stop": ("",)}, "stop strings must be non-empty"),
    ({"stop": ("</s>", "")}, "stop strings must be non-empty"),
    ({"seed": 2**64}, r"seed must be in \[0, 2\*\*64\)"),
    ({"seed": -1}, r"seed must be in \[0, 2\*\*64\)"),
    ({"temperature": math.inf}, "temperature must be a finite number"),
    ({"temperature": math.nan}, "temperature"),
    ({"temperature": -0.1}, "temperature"),
])
def test_bad_request_settings_fail_before_any_work(engine: SpecGuardEngine,
                                                   overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SpecGuardConfig(**overrides)
    calls = len(engine.target.model.calls)
    with pytest.raises(ValueError, match=match):
        engine.generate("hi", **overrides)
    assert len(engine.target.model.calls) == calls  # rejected up front: the model never ran


def test_largest_seed_runs(engine: SpecGuardEngine) -> None:
    result = engine.generate("hi", seed=2**64 - 1, k=2, temperature=0.7)
    assert result.finish_reason == "stop"


@pytest.mark.parametrize("t", [1e-39, 1e-45, 5e-6, 0.0])
def test_near_zero_temperature_is_greedy(engine: SpecGuardEngine, t: float) -> None:
    assert SpecGuardConfig(temperature=t).temperature == 0.0
    result = engine.generate("hi", temperature=t, k=3)
    assert result.text == engine.generate("hi", temperature=0.0, k=3).text
    assert SpecGuardConfig(temperature=1e-5).temperature == 1e-5  # vLLM's threshold itself samples


@pytest.mark.parametrize("field", ["confidence_min", "confidence_max", "grounding_min",
                                   "grounding_max"])
@pytest.mark.parametrize("value", [-math.inf, math.inf, math.nan])
def test_non_finite_bounds_are_rejected(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"bounds must be finite numbers, got {field}="):
        NormBounds(**{field: value})
    with pytest.raises(ValueError, match="finite"):
        parse_sets([f"bounds={{\"{field}\": {value}}}".replace("inf", "Infinity")
                    .replace("nan", "NaN")])


@pytest.mark.parametrize(("content", "match"), [
    (b"", "is not valid JSON"),
    (b"{not json", "is not valid JSON"),
    (b"\xff\xfe", "is not valid JSON"),
    (b"[1, 2, 3, 4]", "holds a list, not an object"),
    (b"null", "holds a NoneType"),
    (b'{"bounds": 3}', "Extra inputs are not permitted"),
    (b'{"confidence_min": "low"}', "confidence_min"),
    (b'{"confidence_min": -Infinity}', "finite"),
    (b'{"confidence_min": 1, "confidence_max": 0}', "confidence_min must be < confidence_max"),
])
def test_bad_bounds_files_name_the_file(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bounds.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as err:
        NormBounds.load(path)
    assert str(path) in str(err.value)


def test_good_bounds_files_load(tmp_path: Path) -> None:
    bounds = NormBounds(confidence_min=-5, confidence_max=-0.5, grounding_min=0.9)
    bounds.save(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"bounds": ' + bounds.model_dump_json() + "}")
    assert NormBounds.load(tmp_path / "a.json") == NormBounds.load(tmp_path / "b.json") == bounds
