"""How the engine judges a draft step: what the proposal captures for the verifier, the verifier's
verdict (from the draft's own signals, or the target's with `experimental.scoring_model =
"target"`), and the target's one pass over the step (a check, target scoring, or the speculative
fallback's first pass).

`Judge` is the glue between the models and the pure parts: signals live in `verify/signals.py`,
the score and the route in `verify/verifier.py` (verifiers by name: `verify/registry.py`), the
token rules in `accept.py`. One per engine; it holds no per-request state (the request's caches
and its plan come in with `Request`), and it makes each request's plan (`plan.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard_core.cache import capture
from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import Target, TentativePass
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.proposal import Candidate, SampleSpec
from specguard_core.engine.accept import Rules
from specguard_core.engine.plan import PairFacts, Plan, make_plan
from specguard_core.engine.request import Request
from specguard_core.engine.selector import Selector
from specguard_core.engine.verify.cards import Cards
from specguard_core.engine.verify.registry import verifier_for
from specguard_core.engine.verify.verifier import (
    Verdict,
    draft_scores,
    structural_check,
    target_scores,
    verify,
)
from specguard_core.remote.target import RemoteTarget
from specguard_core.text.errors import InputError
from specguard_core.types import StepKind


@dataclass
class Judge:
    """The draft/target pair as the verifier sees it. `same_vocab`: ids pass between the models as
    they are; otherwise as text (`convert`)."""

    draft: CachedModel
    target: Target
    same_vocab: bool
    cards: Cards = field(default_factory=Cards)
    rules: Rules = field(init=False)  # the token rules over the target's vocabulary

    def __post_init__(self) -> None:
        self.rules = Rules(self.target.tokenizer, getattr(self.target, "device", "cpu"))

    def resolve_verifier(self, cfg: SpecGuardConfig) -> SpecGuardConfig:
        """`verifier="auto"` becomes the card shipped for the scoring model (`specguard_core/
        verifiers/`, matched by fingerprint) when there is one, else "paper"; default bounds
        become those shipped for the scoring model, if any (`verify/bounds.py`). The request's
        config holds what is used (its result names the verifier). Needs an in-process scoring model
        (`check_served_target` refuses target scoring when the target is served)."""
        handle = self.target if cfg.experimental.scoring_model == "target" else self.draft
        assert isinstance(handle, CachedModel)
        if not handle.hidden_layers:  # no card can read it: "auto" is the paper's ensemble
            return cfg.merged(verifier="paper") if cfg.verifier == "auto" else cfg
        assert isinstance(handle, ModelHandle)  # cards and shipped bounds read its model
        return cfg.merged(verifier=self.cards.resolve(cfg.verifier, handle.model, handle.tokenizer),
                          bounds=self.cards.bounds(cfg.bounds, handle.model, handle.tokenizer))

    def plan(self, cfg: SpecGuardConfig, tools: bool) -> Plan:
        """The plan of a request under `cfg` (its verifier resolved) on this pair."""
        scorer = self.target if cfg.experimental.scoring_model == "target" else self.draft
        assert isinstance(scorer, CachedModel)
        facts = PairFacts(self.same_vocab, isinstance(self.target, CachedModel | RemoteTarget),
                          self.draft.guesses, self.capture_layers(scorer, cfg),
                          self.pool_layers(scorer, cfg))
        return make_plan(cfg, facts, self.rules, tools)

    def draft_spec(self, req: Request, selector: Selector) -> SampleSpec:
        """How the draft proposes this request's step: k candidates, sampling, the step rules,
        and what to capture for the verifier (attention rows, pooled hidden states)."""
        cfg, plan = req.cfg, req.plan
        by_draft = plan.scoring == "draft"
        return SampleSpec(cfg.k, cfg.temperature, cfg.top_p, req.budget(req.draft), req.rules,
                          plan.capture if by_draft else None, cfg.experimental.sparsify_threshold,
                          hidden=cfg.k > 1 and selector.mode == "hidden",
                          pool_layers=plan.pool if by_draft else (), shaping=req.draft_shaping,
                          grace=req.grace(), lookahead=plan.guesses if plan.guess_proposals
                          else 0, call_tokens=req.call_budget(), top_logprobs=req.top_logprobs)

    def score(self, req: Request, cand: Candidate, kind: StepKind
              ) -> tuple[Verdict, TentativePass | None]:
        """The verdict on the selected draft step, and the target's pass over it when the target
        scored it (tentative: kept or discarded by what follows)."""
        reason, call = structural_check(cand.text, kind, req.tools, req.required,
                                        self.target.tokenizer, req.response_template,
                                        req.answer_check,
                                        req.answer_text(), cand.end == "eos")
        tpass, plan = None, req.plan
        if plan.scoring == "target":
            recorder = AttentionRecorder(plan.capture) if plan.capture else None
            tpass = self.target_pass(req, cand, recorder, hidden=bool(plan.pool))
            scores = target_scores(tpass, recorder, req.cfg, plan.pool)
        else:
            scores = draft_scores(cand, req.cfg)
        # a tool call is always checked; the turn's first step too when actions are exact
        action = kind == "tool_call" or (req.acts(kind) and plan.check_actions)
        return verify(scores, req.cfg, reason, call, action=action, route=plan.route), tpass

    def target_pass(self, req: Request, cand: Candidate,
                    recorder: AttentionRecorder | None = None, hidden: bool = False
                    ) -> TentativePass:
        """The target's one pass over the draft step (its pending tokens fed first)."""
        ids = self.convert(cand.fed, self.draft, self.target)
        return self.target.try_tokens(req.target, ids, recorder=recorder, hidden=hidden)

    def checked_tokens(self, cand: Candidate) -> tuple[list[int], int]:
        """(the tokens the target's check judges, how many of them it feeds): the step's, its
        final EOS judged but not fed (same vocabulary), else the target's encoding of its text."""
        if self.same_vocab:
            return cand.token_ids, cand.n_fed
        ids = self.convert(cand.fed, self.draft, self.target)
        return ids, len(ids)

    def convert(self, ids: list[int], src: Target, dst: Target) -> list[int]:
        """`ids` of `src`'s vocabulary in `dst`'s (the same ids when the vocabularies match)."""
        return ids if self.same_vocab else dst.encode(src.decode(ids))

    def capture_layers(self, handle: CachedModel, cfg: SpecGuardConfig) -> frozenset[int] | None:
        """Layers whose attention rows feed grounding; None (no capture) when nothing reads it:
        beta == 1 gives it no weight in the paper's ensemble (also how to measure what capture
        costs), and a verifier card reads it only when it lists the feature."""
        if cfg.beta >= 1 or not verifier_for(cfg.verifier).reads_grounding():
            return None
        if not handle.attention:
            raise InputError(f"the paper verifier's grounding reads attention rows, which the "
                             f"{handle.backend} backend does not give: score with confidence "
                             "alone (beta=1, as the presets but `paper` do), or load the pair "
                             "with --backend transformers")
        assert isinstance(handle, ModelHandle)
        return capture.last_layers(handle.model, cfg.experimental.grounding_layers)

    def pool_layers(self, handle: CachedModel, cfg: SpecGuardConfig) -> tuple[int, ...]:
        """Hidden layers the configured card reads from `handle`; () for the paper's verifier."""
        if cfg.verifier == "paper":
            return ()
        if not handle.hidden_layers:
            raise InputError(f"a verifier card reads middle-layer hidden states, which the "
                             f"{handle.backend} backend does not give: use verifier='paper', "
                             "or load the pair with --backend transformers")
        assert isinstance(handle, ModelHandle)
        return self.cards.hidden_layers(verifier_for(cfg.verifier), handle.model, handle.tokenizer)
