"""The configuration's shape: named modes, experimental knobs apart."""

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
    assert len(outside) <= 33, sorted(outside)  # the rest live under `experimental`
    assert not outside & EXPERIMENTAL
    for cls in (SpecGuardConfig, ExperimentalConfig, EngineConfig, NormBounds):
        undocumented = [n for n, f in cls.model_fields.items() if not f.description]
        assert not undocumented, f"{cls.__name__}: document {undocumented} where declared"


def test_the_default_mode_is_a_named_route() -> None:
    cfg = preset("balanced")
    assert cfg.route == "check" and cfg.action_acceptance == "exact"
    assert (cfg.typical_eps, cfg.typical_delta) == (0.03, 0.1)


def test_infinite_thresholds_are_the_score_route() -> None:
    cfg = SpecGuardConfig(tau_accept=math.inf, tau_reject=-math.inf)
    assert cfg.route == "score" and cfg.thresholds == (math.inf, -math.inf)


def test_k_above_one_when_greedy_warns() -> None:
    with pytest.warns(UserWarning, match="identical greedy candidates"):
        preset("balanced", k=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preset("balanced", k=4, temperature=0.7)


def test_experimental_knobs_live_under_experimental_only() -> None:
    with pytest.raises(ValueError, match=r"check_below is experimental: pass experimental="):
        preset("balanced").merged(check_below=0.25)
    with pytest.raises(ValueError, match="check_below is experimental"):
        SpecGuardConfig(check_below=0.25)
    assert not hasattr(SpecGuardConfig(), "check_below")  # read as cfg.experimental.check_below
    cfg = preset("balanced").merged(experimental={"check_below": 0.25})
    partial = cfg.merged(experimental={"sd_confidence": 0.4})
    assert (partial.experimental.check_below, partial.experimental.sd_confidence) == (0.25, 0.4)
    assert partial.typical_delta == 0.1  # the preset's own values stay
    assert parse_sets(["experimental.check_below=0.5", "fast.experimental.sd_confidence=0.3",
                       "experimental.sd_confidence=0.2"]) == {
        "experimental": {"check_below": 0.5, "sd_confidence": 0.2},
        "fast.experimental": {"sd_confidence": 0.3}}
    with pytest.raises(ValueError, match="not an experimental knob"):
        parse_sets(["experimental.k=2"])
    with pytest.raises(ValueError, match="sentence_transformer"):
        SpecGuardConfig(experimental={"selector": "sentence-transformer"})


def test_a_tau_override_never_changes_the_route() -> None:
    cfg = preset("fast").merged(tau=0.5)
    assert cfg.route == "score" and cfg.thresholds == (0.5, 0.5)
    three_way = SpecGuardConfig(tau_accept=0.9, tau_reject=0.2).merged(tau=0.5)
    assert three_way.thresholds == (0.5, 0.5)  # tau alone: the two-way rule at tau
    with pytest.raises(ValueError, match="route='score'"):  # the lossless default stays lossless
        preset("balanced").merged(tau=0.8)
    with pytest.raises(ValueError, match="tau=0.8 has no effect"):
        SpecGuardConfig(route="check", tau=0.8)
    vouched = preset("balanced").merged(acceptance="vouched", tau=0.8)
    assert vouched.route == "check" and vouched.tau == 0.8


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
