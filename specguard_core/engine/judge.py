"""How the engine judges a draft step: what the proposal captures for the verifier, the verifier's
verdict (from the draft's own signals, or the target's with `scoring_model="target"`), and the
target's one pass over the step (a check, target scoring, or the speculative fallback's first pass).

`Judge` is the glue between the models and the pure parts: signals live in `verify/signals.py`,
the score and the route in `verify/verifier.py` (verifiers by name: `verify/registry.py`), the
acceptance rules in `speculative.py`. One per engine; it holds no per-request state (the
request's caches come in with `Request`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specguard_core.cache import capture
from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import Target, TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.proposal import Candidate, SampleSpec
from specguard_core.engine.request import Request
from specguard_core.engine.selector import Selector
from specguard_core.engine.speculative import Rule, judged_prefix
from specguard_core.engine.verify.cards import Cards
from specguard_core.engine.verify.registry import verifier_for
from specguard_core.engine.verify.verifier import (
    Verdict,
    draft_scores,
    structural_check,
    target_scores,
    verify,
)
from specguard_core.text.token_classes import numeric_ids
from specguard_core.types import StepKind


@dataclass
class Judge:
    """The draft/target pair as the verifier sees it. `same_vocab`: ids pass between the models as
    they are; otherwise as text (`convert`)."""

    draft: ModelHandle
    target: Target
    same_vocab: bool
    cards: Cards = field(default_factory=Cards)
    _numeric: torch.Tensor | None = field(default=None, repr=False)  # [V] bool, built when needed

    def resolve_verifier(self, cfg: SpecGuardConfig) -> SpecGuardConfig:
        """`verifier="auto"` becomes the card shipped for the scoring model (`specguard_core/
        verifiers/`, matched by fingerprint) when there is one, else "paper"; default bounds
        become those shipped for the scoring model, if any (`verify/bounds.py`). The request's
        config holds what is used (its result names the verifier). Needs an in-process scoring model
        (`check_served_target` refuses target scoring when the target is served)."""
        handle = self.target if cfg.scoring_model == "target" else self.draft
        assert isinstance(handle, ModelHandle)
        return cfg.merged(verifier=self.cards.resolve(cfg.verifier, handle.model, handle.tokenizer),
                          bounds=self.cards.bounds(cfg.bounds, handle.model, handle.tokenizer))

    def draft_spec(self, req: Request, selector: Selector) -> SampleSpec:
        """How the draft proposes this request's step: k candidates, sampling, the step rules,
        and what to capture for the verifier (attention rows, pooled hidden states)."""
        cfg = req.cfg
        return SampleSpec(cfg.k, cfg.temperature, cfg.top_p, req.budget(req.draft), req.rules,
                          self.capture_layers(self.draft, cfg), cfg.sparsify_threshold,
                          hidden=cfg.k > 1 and selector.mode == "hidden",
                          pool_layers=self.pool_layers(self.draft, cfg)
                          if cfg.scoring_model == "draft" else (), shaping=req.shaping,
                          grace=req.grace(), lookahead=cfg.draft_lookahead)

    def score(self, req: Request, cand: Candidate, kind: StepKind
              ) -> tuple[Verdict, TentativePass | None]:
        """The verdict on the selected draft step, and the target's pass over it when the target
        scored it (tentative: kept or discarded by what follows)."""
        reason, call = structural_check(cand.text, kind, req.tools, req.required,
                                        self.target.tokenizer, req.response_template,
                                        req.answer_check,
                                        req.answer_text(), cand.end == "eos")
        tpass = None
        if req.cfg.scoring_model == "target":
            target = self.target
            assert isinstance(target, ModelHandle)  # checked in `SpecGuardEngine.stream`
            layers = self.capture_layers(target, req.cfg)
            recorder = AttentionRecorder(layers) if layers else None
            pool = self.pool_layers(target, req.cfg)
            tpass = self.target_pass(req, cand, recorder, hidden=bool(pool))
            scores = target_scores(tpass, recorder, req.cfg, pool)
        else:
            scores = draft_scores(cand, req.cfg)
        # a tool call is always checked; the turn's first step too when actions are exact
        action = kind == "tool_call" or (req.acts(kind) and req.cfg.action_acceptance == "exact")
        return verify(scores, req.cfg, reason, call, action=action), tpass

    def check(self, req: Request, tpass: TentativePass, ids: list[int], rule: Rule) -> int:
        """How many leading tokens of the draft step `ids` the target's check passes under `rule`
        (`tpass`: the target's pass over them)."""
        sensitive = self.numeric_mask() if rule == "exact-numbers" else None
        return judged_prefix(tpass.logits, ids, req.cfg, req.target.ids, rule, sensitive,
                             req.shaping)

    def numeric_mask(self) -> torch.Tensor:
        """`[V]` bool over the target's vocabulary: the tokens `exact-numbers` judges exactly."""
        if self._numeric is None:
            tok = self.target.tokenizer
            mask = torch.zeros(len(tok), dtype=torch.bool)
            mask[sorted(numeric_ids(tok))] = True
            self._numeric = mask.to(getattr(self.target, "device", "cpu"))  # the logits' device
        return self._numeric

    def target_pass(self, req: Request, cand: Candidate,
                    recorder: AttentionRecorder | None = None, hidden: bool = False
                    ) -> TentativePass:
        """The target's one pass over the draft step (its pending tokens fed first)."""
        ids = self.convert(cand.fed, self.draft, self.target)
        return self.target.try_tokens(req.target, ids, recorder=recorder, hidden=hidden)

    def checked_ids(self, cand: Candidate, tpass: TentativePass) -> list[int]:
        """The tokens the target check judges: the step's, its final EOS included (same vocab)."""
        return cand.token_ids if self.same_vocab else tpass.ids

    def convert(self, ids: list[int], src: Target, dst: Target) -> list[int]:
        """`ids` of `src`'s vocabulary in `dst`'s (the same ids when the vocabularies match)."""
        return ids if self.same_vocab else dst.encode(src.decode(ids))

    def capture_layers(self, handle: ModelHandle, cfg: SpecGuardConfig) -> frozenset[int] | None:
        """Layers whose attention rows feed grounding; None (no capture) when nothing reads it:
        beta == 1 gives it no weight in the paper's ensemble (also how to measure what capture
        costs), and a verifier card reads it only when it lists the feature."""
        if cfg.beta >= 1 or not verifier_for(cfg.verifier).reads_grounding():
            return None
        return capture.last_layers(handle.model, cfg.grounding_layers)

    def pool_layers(self, handle: ModelHandle, cfg: SpecGuardConfig) -> tuple[int, ...]:
        """Hidden layers the configured card reads from `handle`; () for the paper's verifier."""
        return self.cards.hidden_layers(verifier_for(cfg.verifier), handle.model, handle.tokenizer)
