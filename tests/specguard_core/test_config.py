"""The configuration's shape: named modes, experimental knobs apart, old names as aliases."""

from __future__ import annotations

import math
import warnings

import pytest

from specguard_core.config import (
    EXPERIMENTAL,
    PRESETS,
    EngineConfig,
    ExperimentalConfig,
    NormBounds,
    SpecGuardConfig,
    parse_sets,
    preset,
)


def test_the_user_facing_config_is_small() -> None:
    outside = set(SpecGuardConfig.model_fields) - {"experimental"}
    assert len(outside) <= 27, sorted(outside)
    assert not outside & EXPERIMENTAL
    for cls in (SpecGuardConfig, ExperimentalConfig, EngineConfig, NormBounds):
        undocumented = [n for n, f in cls.model_fields.items() if not f.description]
        assert not undocumented, f"{cls.__name__}: document {undocumented} where declared"


def test_the_default_mode_is_a_named_route() -> None:
    cfg = preset("balanced")
    assert cfg.route == "check" and cfg.action_acceptance == "exact"
    assert (cfg.typical_eps, cfg.typical_delta) == (0.03, 0.1)  # read through to experimental


def test_infinite_thresholds_still_mean_check_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="route='check'"):
        cfg = SpecGuardConfig(tau_accept=math.inf, tau_reject=-math.inf)
    assert cfg.route == "check" and (cfg.tau_accept, cfg.tau_reject) == (None, None)


def test_k_above_one_when_greedy_warns() -> None:
    with pytest.warns(UserWarning, match="identical greedy candidates"):
        preset("balanced", k=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preset("balanced", k=4, temperature=0.7)


def test_experimental_knobs_keep_their_old_names_as_aliases() -> None:
    with pytest.warns(DeprecationWarning, match="experimental"):
        cfg = preset("balanced").merged(check_below=0.25)
    assert cfg.experimental.check_below == 0.25
    assert cfg.experimental.typical_eps == 0.03  # the preset's other experimental values stay
    partial = preset("balanced").merged(experimental={"sd_confidence": 0.4})
    assert (partial.sd_confidence, partial.typical_delta) == (0.4, 0.1)
    assert parse_sets(["experimental.check_below=0.5", "fast.sd_confidence=0.3"]) == {
        "check_below": 0.5, "fast.sd_confidence": 0.3}
    with pytest.raises(ValueError, match="sentence_transformer"):
        SpecGuardConfig(experimental={"selector": "sentence-transformer"})


def test_a_tau_override_is_the_two_way_rule() -> None:
    cfg = preset("balanced").merged(tau=0.5)
    assert cfg.route == "score" and cfg.thresholds == (0.5, 0.5)


def test_fallback_k_follows_k_unless_set() -> None:
    assert SpecGuardConfig(k=5).fallback_k is None and SpecGuardConfig(k=5).fallback_samples == 5
    assert SpecGuardConfig(k=5).merged(k=3).fallback_samples == 3  # still unset: follows k
    pinned = SpecGuardConfig(k=5, fallback_k=2)
    assert pinned.merged(k=7).fallback_samples == 2
    assert parse_sets(["fallback_k=3"]) == {"fallback_k": 3}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_the_presets_keep_their_own_fallback_k(name: str) -> None:
    """Every preset sets fallback_k, so its samples do not move with a changed k."""
    own = PRESETS[name]["fallback_k"]
    assert preset(name).fallback_samples == own
    assert preset(name, k=8, temperature=0.7).fallback_samples == own
