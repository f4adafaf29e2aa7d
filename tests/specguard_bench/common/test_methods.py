"""The methods' configs: `--set` parsing, overrides scoped to one preset, the variants."""

from __future__ import annotations

import math

import pytest

from specguard_bench.common.methods import specguard_config, split_overrides
from specguard_core.config import NormBounds, SpecGuardConfig, parse_sets


def test_parse_sets_types_and_validation() -> None:
    sets = parse_sets(["k=4", "tau=-inf", "fast.tau=0.6", 'step_delimiters=["\\n"]'])
    assert sets == {"k": 4, "tau": -math.inf, "fast.tau": 0.6, "step_delimiters": ("\n",)}
    for bad in ["k", "nope=1", "k=0", "slow.k=2", "selector=other"]:
        with pytest.raises(ValueError):
            parse_sets([bad])


def test_overrides_scope_to_one_preset() -> None:
    sets = {"k": 4, "fast.k": 2, "paper.tau": 0.5}
    assert split_overrides(sets, "fast") == {"k": 2}
    assert split_overrides(sets, "paper") == {"k": 4, "tau": 0.5}
    cfg = specguard_config(
        SpecGuardConfig(),
        "specguard-paper",
        sets,
        max_new_tokens=9,
        bounds=NormBounds(confidence_min=-3.0),
    )
    assert (cfg.k, cfg.tau, cfg.fallback, cfg.max_new_tokens) == (4, 0.5, "sample", 9)
    assert cfg.bounds.confidence_min == -3.0


def test_variants_and_balanced_configs() -> None:
    base = SpecGuardConfig()
    sd = specguard_config(base, "specguard-paper-sd", {"paper.k": 4}, max_new_tokens=50)
    paper = specguard_config(base, "specguard-paper", {}, max_new_tokens=50)
    assert sd.fallback == "speculative" and paper.fallback == "sample"
    assert sd.k == 4 and sd.fallback_k == paper.fallback_k == 16
    balanced = specguard_config(base, "specguard-balanced", {}, max_new_tokens=50)
    assert balanced.route == "check" and balanced.fallback == "speculative"
    # an override of tau alone is the two-way rule at that tau, on the score route only
    two_way = specguard_config(base, "specguard-fast", {"fast.tau": 0.6}, max_new_tokens=50)
    assert two_way.thresholds == (0.6, 0.6) and two_way.route == "score"
    with pytest.raises(ValueError, match="route='score'"):
        specguard_config(base, "specguard-balanced", {"balanced.tau": 0.6}, max_new_tokens=50)


def test_count_calls_counts_each_call_and_its_seconds_under_the_key() -> None:
    import collections
    import time

    from specguard_bench.common.methods import count_calls

    class Model:
        def forward(self, n: int) -> int:
            time.sleep(0.01)
            return n + 1

    model, seen = Model(), collections.defaultdict(lambda: [0, 0.0])
    count_calls(model, "forward", "draft", seen)
    assert [model.forward(i) for i in range(3)] == [1, 2, 3]  # results pass through
    assert seen["draft"][0] == 3 and seen["draft"][1] >= 0.03
    assert set(seen) == {"draft"}
