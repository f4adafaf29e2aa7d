"""The target's check of a draft step while the draft writes it.

Checking a step only once it is written wastes every draft token after the first one the target
refuses (on the default pair most checked steps fail, after about 60 wasted tokens each). A
`GrowingCheck` watches the draft's proposal (`propose(..., watch=...)`): after every
`check_tokens` unchecked tokens, right after a token the draft gave less than `check_below`
probability, or once the product of its probabilities of the unchecked tokens falls below
`check_run_below`, the target's tentative pass over the step grows by the new tokens
(`TentativePass.extend`, one forward) and judges them with the same typical acceptance as the
whole-step check; at the first refused token the draft stops. The verdicts are the whole-step
check's (the same target rows, fed in pieces: equal in float32; bf16 rounding of the smaller passes
can flip a borderline token). The watcher sees whole characters only, so a budget cut that drops an
unfinished character never changes a verdict. A served target (`RemoteTarget`) grows its pass with
one more request over the whole prefix (`try_more`; vLLM re-encodes the context for a request with
prompt_logprobs, so each growth costs the server a prefill).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState, Target, TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.sampling import Shaping
from specguard_core.engine.request import Request
from specguard_core.engine.speculative import Rule, draft_doubts, judged_prefix
from specguard_core.remote.target import RemoteTarget


@dataclass
class GrowingCheck:
    """Watches one draft step (k=1, same vocabulary, an in-process or served target). `passed`
    leading step tokens passed the target's check; `checked` were judged; `seconds` spent in the
    target's passes. Call `finish` when the proposal ends to judge the rest and get the pass."""

    target: ModelHandle | RemoteTarget
    state: CacheState  # the target's, for this request
    cfg: SpecGuardConfig
    rule: Rule = "typical"
    sensitive: torch.Tensor | None = None  # [V] bool: the tokens `exact-numbers` judges exactly
    shaping: Shaping | None = None  # the request's (with its grammar); None: `Shaping.of(cfg)`
    tpass: TentativePass | None = None
    checked: int = 0
    passed: int = 0
    seconds: float = 0.0

    @classmethod
    def of(cls, target: Target, req: Request, same_vocab: bool, rule: Rule = "typical",
           sensitive: torch.Tensor | None = None) -> GrowingCheck | None:
        """A check of `req`'s next draft step under `rule` while it is written, when configured
        (`check_tokens`) and when every step goes to the target check anyway: one candidate,
        `route="check"`, a speculative fallback to finish a refused step, draft scoring, the same
        vocabulary, an in-process or served (vLLM) target, no forced tool call, and a rule that
        can pass tokens at this temperature (sampling, `exact` leaves every token to the
        fallback's speculative sampling); else None."""
        cfg = req.cfg
        if (cfg.check_tokens == 0 or cfg.k != 1 or cfg.route != "check"
                or cfg.fallback != "speculative" or cfg.scoring_model != "draft" or req.forced
                or not same_vocab or not isinstance(target, ModelHandle | RemoteTarget)
                or (cfg.temperature > 0 and rule == "exact")):
            return None
        return cls(target, req.target, cfg, rule, sensitive, req.shaping)

    def __call__(self, token_ids: list[int], logprobs: list[float]) -> bool:
        """`propose`'s watcher: True (stop the draft) once a written token was refused."""
        new = len(token_ids) - self.checked
        cfg = self.cfg
        if new <= 0 or (new < cfg.check_tokens and not draft_doubts(
                logprobs[self.checked:], cfg.check_below, cfg.check_run_below)):
            return False
        self._judge(token_ids, len(token_ids))
        return self.passed < self.checked

    def finish(self, token_ids: list[int], n_fed: int) -> tuple[TentativePass, int]:
        """Judge the step's remaining tokens (`n_fed` of them went through the draft; a final EOS
        is judged, not fed): (the target's pass over the fed tokens, how many tokens passed)."""
        if self.passed == self.checked:
            self._judge(token_ids, n_fed)
        assert self.tpass is not None
        return self.tpass, self.passed

    def _judge(self, token_ids: list[int], n_fed: int) -> None:
        """Feed the step's unfed tokens up to `n_fed` to the target's pass and judge the
        unjudged ones (all of `token_ids` after `checked`)."""
        t0 = time.perf_counter()
        fed = token_ids[len(self.tpass.ids) if self.tpass else 0: n_fed]
        if self.tpass is None:
            self.tpass = self.target.try_tokens(self.state, fed)
        else:
            self.tpass.extend(fed)
        start = self.checked
        ok = judged_prefix(self.tpass.logits[start:], token_ids[start:], self.cfg,
                           self.state.ids + token_ids[:start], self.rule, self.sensitive,
                           self.shaping)
        self.checked = len(token_ids)
        self.passed = start + ok
        self.seconds += time.perf_counter() - t0
