"""Token rules (`engine/accept.py`): each rule on hand-built target logits, the registry, and a
new rule added as one class."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.sampling import Shaping, warp_logits
from specguard_core.engine.accept import (
    RULES,
    ExactNumbers,
    Rules,
    TokenRule,
    register,
    typical_passed,
)
from specguard_core.text.errors import InputError


class Vocab:
    """A tokenizer as `exact-numbers` reads it: ids 0-3 are words, 4-5 digits."""

    pieces = ["a", "b", "c", "d", "7", "12"]

    def __len__(self) -> int:
        return len(self.pieces)

    def get_vocab(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self.pieces)}

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.pieces[i] for i in ids]

    def decode(self, ids: Sequence[int], **_: object) -> str:
        return "".join(self.pieces[i] for i in ids)


def typ(logits: torch.Tensor, ids: list[int], eps: float, delta: float,
        shaping: Shaping | None = None, prefix: Sequence[int] = (), ratio: float = 0.0) -> int:
    cfg = SpecGuardConfig(typical_eps=eps, typical_delta=delta, typical_ratio=ratio)
    return typical_passed(logits, ids, cfg, prefix, shaping or Shaping())


def test_typical_acceptance_threshold() -> None:
    peaked = torch.tensor([[5.0, 0.0, 0.0, 0.0]])  # low entropy: bound ~ min(eps, delta*e^-H)
    flat = torch.zeros(1, 4)  # H = log 4: bound = min(0.09, 0.3 / 4) = 0.075 < 0.25
    assert typ(peaked, [0], 0.09, 0.3) == 1
    assert typ(peaked, [1], 0.09, 0.3) == 0  # p(1) ~ 0.0066
    assert typ(flat, [3], 0.09, 0.3) == 1
    assert typ(flat, [3], 0.3, 2.0) == 0  # bound = min(0.3, 0.5) > 0.25


def test_typical_counts_leading_passes() -> None:
    logits = torch.tensor([[5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]])
    assert typ(logits, [0, 3, 1], 0.09, 0.3) == 2  # third token: p ~ 0.0066 fails
    assert typ(logits, [1, 3, 0], 0.09, 0.3) == 0
    assert typ(logits, [0, 3, 0], 0.09, 0.3) == 3


def test_ratio_rejects_what_the_target_is_sure_against() -> None:
    """The measured case (GSM8K problem 0, "16 - 3 - 4 = 10"): the target gave "9" 0.85 and the
    draft's "1" 0.13; Medusa's bound (0.09) passes it, a ratio of 0.3 does not."""
    logits = torch.tensor([[0.85, 0.13, 0.01, 0.01]]).log()
    assert typ(logits, [1], 0.09, 0.3) == 1
    assert typ(logits, [1], 0.09, 0.3, ratio=0.3) == 0
    assert typ(logits, [0], 0.09, 0.3, ratio=1.0) == 1  # the argmax always passes
    flat = torch.tensor([[0.3, 0.25, 0.25, 0.2]]).log()  # unsure: near-equal alternatives pass
    assert typ(flat, [3], 0.09, 0.3, ratio=0.3) == 1


def test_typical_judges_the_shaped_target_distribution() -> None:
    logits = torch.tensor([[4.0, 3.9, 0.0, 0.0]] * 2)  # two near-equal favourites
    assert typ(logits, [1, 1], 0.09, 0.3) == 2
    assert typ(logits, [1, 1], 0.09, 0.3, Shaping(top_k=1)) == 0  # outside top-1
    # token 1 already in the sequence: a strong penalty pushes it under the bound
    assert typ(logits, [1, 1], 0.09, 0.3, Shaping(repetition_penalty=50.0), [2]) == 1
    assert typ(logits, [1, 1], 0.09, 0.3, Shaping(repetition_penalty=50.0), [1]) == 0
    assert torch.equal(warp_logits(logits, Shaping()), logits)


def test_exact_passes_the_targets_greedy_tokens_and_nothing_when_sampling() -> None:
    rules = Rules(Vocab())
    logits = torch.tensor([[0.0, 3.0, 2.9, 0, 0, 0], [5.0, 0, 0, 0, 0, 0]])  # argmax 1, then 0
    greedy, sampled = SpecGuardConfig(k=1, temperature=0.0), SpecGuardConfig(temperature=0.7)
    assert rules["exact"].passed(logits, [1, 0], greedy, (), Shaping()) == 2
    assert rules["exact"].passed(logits, [2, 0], greedy, (), Shaping()) == 0  # plausible, not its
    assert rules["typical"].passed(logits, [2, 0], greedy, (), Shaping()) == 2
    assert rules["exact"].passed(logits, [1, 0], sampled, (), Shaping()) == 0
    assert not rules["exact"].passes_sampled and rules["typical"].passes_sampled


def test_exact_numbers_is_exact_on_digits_only() -> None:
    rules = Rules(Vocab())
    greedy = SpecGuardConfig(k=1, temperature=0.0)
    # the target prefers "b" then "7"; the draft wrote "c" (a word) then "12" (a number)
    logits = torch.tensor([[0.0, 3.0, 2.9, 0, 0, 0], [0, 0, 0, 0, 3.0, 2.9]])
    numbers = rules["exact-numbers"]
    assert numbers.passed(logits, [2, 4], greedy, (), Shaping()) == 2  # word typical, digit exact
    assert numbers.passed(logits, [2, 5], greedy, (), Shaping()) == 1  # another number: refused
    assert rules["exact-numbers"] is numbers  # one instance per engine
    assert isinstance(numbers, ExactNumbers) and numbers.mask() is numbers.mask()  # built once


def test_vouched_is_typical_or_exact_by_the_steps_score() -> None:
    rules = Rules(Vocab())
    cfg = SpecGuardConfig(acceptance="vouched", tau=0.8)
    vouched = rules["vouched"]
    assert vouched.for_score(0.9, cfg) is rules["typical"]
    assert vouched.for_score(0.5, cfg) is rules["exact"]
    assert vouched.for_score(None, cfg) is rules["typical"]  # while written: the looser rule
    assert rules["typical"].for_score(0.1, cfg) is rules["typical"]


def test_an_unknown_rule_is_an_input_error_naming_the_rules() -> None:
    with pytest.raises(InputError, match="unknown acceptance rule 'nope'; choose one of exact"):
        Rules(Vocab())["nope"]


def test_a_new_rule_is_one_class_and_one_registration() -> None:
    @register
    class FirstOnly(TokenRule):
        name = "first-only"

        def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
                   prefix: Sequence[int], shaping: Shaping) -> int:
            return min(1, len(ids))

    try:
        rule = Rules(Vocab())["first-only"]
        assert rule.passed(torch.zeros(3, 6), [1, 2, 3], SpecGuardConfig(), (), Shaping()) == 1
    finally:
        del RULES["first-only"]
