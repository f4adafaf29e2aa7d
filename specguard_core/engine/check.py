"""The target's check of a draft step: one pass over the step, judged token by token.

A `TargetCheck` judges one draft step's tokens under a token rule (`accept.py`) from the target's
tentative pass over them. It either grows while the draft writes the step (`TargetCheck.growing`,
the plan's "growing" check, watching `propose(..., watch=...)`), or grows once, over the whole
written step (`TargetCheck.whole`): one path either way, ended by `finish`.

Why grow: checking a step only once it is written wastes every draft token after the first one
the target refuses (on the default pair most checked steps fail, after about 60 wasted tokens
each). Growing, the pass grows by the new tokens (`TentativePass.extend`, one forward) after
every `check_every` unjudged tokens, right after a token the draft gave less than
`experimental.check_below` probability, or once the product of its probabilities of the
unjudged tokens falls below `check_run_below`; at the first refused token the draft stops. The
verdicts are the whole-step check's (the same target rows, fed in pieces: equal in float32; bf16
rounding of the smaller passes can flip a borderline token). The watcher sees whole characters
only, so a budget cut that drops an unfinished character never changes a verdict. A served
target (`RemoteTarget`) grows its pass with one more request over the whole prefix (vLLM
re-encodes the context for a request with prompt_logprobs, so each growth costs the server a
prefill).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from specguard_core.cache.state import CacheState, Target, TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.sampling import Shaping
from specguard_core.engine.accept import TokenRule
from specguard_core.engine.request import Request
from specguard_core.engine.speculative import draft_doubts


@dataclass
class TargetCheck:
    """The target's check of one draft step under `rule`. `passed` leading step tokens passed;
    `checked` were judged; `seconds` spent in the target's passes; `every` is how many unjudged
    tokens a growing check waits for (0: the check grows once, in `finish`)."""

    target: Target
    state: CacheState  # the target's, for this request
    cfg: SpecGuardConfig
    rule: TokenRule
    shaping: Shaping
    every: int = 0
    tpass: TentativePass | None = None
    checked: int = 0
    passed: int = 0
    seconds: float = 0.0

    @classmethod
    def growing(cls, target: Target, req: Request, rule: TokenRule) -> TargetCheck | None:
        """A check of `req`'s next draft step under `rule` while it is written, when the plan's
        check grows for `rule` and no tool call is forced (the target writes that step); else
        None."""
        if req.forced or not req.plan.grows(rule, req.cfg.temperature):
            return None
        return cls(target, req.target, req.cfg, rule, req.shaping, req.plan.check_every)

    @classmethod
    def whole(cls, target: Target, req: Request, rule: TokenRule,
              tpass: TentativePass | None = None) -> TargetCheck:
        """A check of a written step under `rule` (over `tpass`, the target's pass that scored
        it, when there is one)."""
        return cls(target, req.target, req.cfg, rule, req.shaping, tpass=tpass)

    def __call__(self, token_ids: list[int], logprobs: list[float]) -> bool:
        """`propose`'s watcher: True (stop the draft) once a written token was refused."""
        new = len(token_ids) - self.checked
        cfg = self.cfg
        if new <= 0 or (new < self.every and not draft_doubts(
                logprobs[self.checked:], cfg.experimental.check_below, cfg.check_run_below)):
            return False
        self._judge(token_ids, len(token_ids))
        return self.passed < self.checked

    def finish(self, token_ids: list[int], n_fed: int, rule: TokenRule
               ) -> tuple[TentativePass, int]:
        """Judge the step's remaining tokens (`n_fed` of them go through the target; a final EOS
        is judged, not fed), all of them again under `rule` when it is not the rule they were
        judged by (a tool call begun mid-turn, a step the verifier did not vouch for): (the
        target's pass over the fed tokens, how many leading tokens passed)."""
        if self.passed == self.checked:
            self._judge(token_ids, n_fed)
        assert self.tpass is not None
        if rule is not self.rule:
            again = rule.passed(self.tpass.logits, token_ids, self.cfg, self.state.ids,
                                self.shaping)
            self.passed, self.rule = min(self.passed, again), rule
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
        ok = self.rule.passed(self.tpass.logits[start:], token_ids[start:], self.cfg,
                              self.state.ids + token_ids[:start], self.shaping)
        self.checked = len(token_ids)
        self.passed = start + ok
        self.seconds += time.perf_counter() - t0
