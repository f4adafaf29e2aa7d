"""Token rules: how the target's check judges a draft step's tokens, one class per rule.

A rule reads the target's pass over the step (`logits: [>=T, V]`, row i predicting `ids[i]`) and
says how many leading tokens pass. Built in:

- `typical`: Medusa's typical acceptance (Cai et al. 2024): p >= min(typical_eps, typical_delta *
  exp(-H)), H the entropy of the target's distribution there, and p >= typical_ratio * max p
  (tokens the target could plausibly write; the text may drift from the target's).
- `exact`: the target's own tokens: its argmax after the request's repetition penalty when greedy
  (lossless); above temperature 0 it passes nothing, and the speculative fallback's speculative
  sampling judges the tokens instead, so they follow the target's distribution.
- `exact-numbers`: exact on tokens holding a digit, an operator or a list marker (its token mask
  is built from the target's vocabulary when first used), typical elsewhere.
- `vouched`: typical for a step whose verifier score is >= tau, exact for the rest.

`p` is the target's distribution after the request's shaping (`decoding/sampling.py`). A new rule
is one class here with `name` and `passed`, and one `@register` line; `acceptance="<name>"` then
uses it. `Rules` holds one instance of each per engine (masks are built once per vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.sampling import Shaping, warp_logits
from specguard_core.text.errors import InputError
from specguard_core.text.tokens import numeric_ids


class TokenRule:
    """One token rule. `passed` says how many leading tokens of `ids` pass; `for_score` is the
    rule a step with verifier score `score` is judged by (itself, except for `vouched`);
    `passes_sampled` whether it can pass a token above temperature 0 (the check while the draft
    writes runs only then)."""

    name: ClassVar[str]
    passes_sampled: ClassVar[bool] = True

    def __init__(self, tokenizer: Any, device: Any = "cpu", rules: Rules | None = None) -> None:
        self.tokenizer, self.device, self.rules = tokenizer, device, rules

    def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
               prefix: Sequence[int], shaping: Shaping) -> int:
        raise NotImplementedError

    def for_score(self, score: float | None, cfg: SpecGuardConfig) -> TokenRule:
        return self


RULES: dict[str, type[TokenRule]] = {}


def register(cls: type[TokenRule]) -> type[TokenRule]:
    """Register a rule class under its `name` (`acceptance="<name>"`)."""
    RULES[cls.name] = cls
    return cls


def typical_passed(logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
                   prefix: Sequence[int], shaping: Shaping) -> int:
    """How many leading tokens of `ids` pass the typical bound under the request's settings
    (`typical_eps`, `typical_delta`, `typical_ratio`), after its repetition penalty (for
    `prefix + ids[:i]`), top-k and min-p."""
    if not ids:
        return 0
    rows = shaping.penalise_rows(logits[: len(ids)].float(), prefix, ids)  # [T, V]
    logp = torch.log_softmax(warp_logits(rows, shaping), dim=-1)  # [T, V]
    plogp = logp.exp() * logp  # [T, V]
    if shaping.cuts:  # tokens they cut: 0 log 0 = 0
        plogp = plogp.masked_fill(logp.isneginf(), 0.0)
    entropy = -plogp.sum(-1)  # [T]
    p_x = logp.gather(-1, torch.tensor(ids, device=logp.device)[:, None])[:, 0].exp()  # [T]
    bound = torch.minimum(torch.full_like(entropy, cfg.typical_eps),
                          cfg.typical_delta * torch.exp(-entropy))  # [T]
    if cfg.typical_ratio > 0:
        bound = torch.maximum(bound, cfg.typical_ratio * logp.max(dim=-1).values.exp())
    return _leading(p_x >= bound)


def exact_ok(logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig, prefix: Sequence[int],
             shaping: Shaping) -> torch.Tensor:
    """`[T]` bool: token i is the target's own greedy choice (after the repetition penalty); all
    False above temperature 0 (speculative sampling decides there)."""
    ids_t = torch.tensor(ids, device=logits.device)  # [T]
    if cfg.temperature > 0:
        return torch.zeros(len(ids), dtype=torch.bool, device=logits.device)
    rows = shaping.penalise_rows(logits[: len(ids)].float(), prefix, ids)  # [T, V]
    return rows.argmax(-1) == ids_t


def _leading(ok: torch.Tensor) -> int:
    """The length of the run of True at the start of `ok: [T]` (one host sync)."""
    return int(ok.long().cumprod(0).sum())


@register
class Typical(TokenRule):
    name = "typical"

    def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
               prefix: Sequence[int], shaping: Shaping) -> int:
        return typical_passed(logits, ids, cfg, prefix, shaping)


@register
class Exact(TokenRule):
    name = "exact"
    passes_sampled = False

    def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
               prefix: Sequence[int], shaping: Shaping) -> int:
        return _leading(exact_ok(logits, ids, cfg, prefix, shaping)) if ids else 0


@register
class ExactNumbers(TokenRule):
    name = "exact-numbers"
    _mask: torch.Tensor | None = None  # [V] bool: the tokens judged exactly, built when first used

    def mask(self) -> torch.Tensor:
        if self._mask is None:
            mask = torch.zeros(len(self.tokenizer), dtype=torch.bool)
            mask[sorted(numeric_ids(self.tokenizer))] = True
            self._mask = mask.to(self.device)
        return self._mask

    def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
               prefix: Sequence[int], shaping: Shaping) -> int:
        if not ids:
            return 0
        ids_t = torch.tensor(ids, device=logits.device)  # [T]
        sensitive = self.mask().to(logits.device)[ids_t]  # [T]
        exact = _leading(exact_ok(logits, ids, cfg, prefix, shaping) | ~sensitive)
        return min(exact, typical_passed(logits, ids, cfg, prefix, shaping))


@register
class Vouched(TokenRule):
    name = "vouched"

    def for_score(self, score: float | None, cfg: SpecGuardConfig) -> TokenRule:
        """Typical where the verifier vouches for the step (score >= tau) and while the step is
        written (no score yet: the looser rule, judged again once scored); exact elsewhere."""
        assert self.rules is not None
        return self.rules["typical" if score is None or score >= cfg.tau else "exact"]

    def passed(self, logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
               prefix: Sequence[int], shaping: Shaping) -> int:
        return self.for_score(None, cfg).passed(logits, ids, cfg, prefix, shaping)


class Rules:
    """One instance of each registered rule for an engine's target vocabulary (`tokenizer`, its
    logits on `device`), built when first asked for."""

    def __init__(self, tokenizer: Any, device: Any = "cpu") -> None:
        self.tokenizer, self.device = tokenizer, device
        self._built: dict[str, TokenRule] = {}

    def __getitem__(self, name: str) -> TokenRule:
        if name not in self._built:
            if name not in RULES:
                raise InputError(f"unknown acceptance rule {name!r}; choose one of "
                                 f"{', '.join(sorted(RULES))}")
            self._built[name] = RULES[name](self.tokenizer, self.device, self)
        return self._built[name]
