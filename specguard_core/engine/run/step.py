"""One step of a request, top to bottom (`run_step`).

1. **draft** (`_draft`): the draft catches up and proposes k candidates as one batch over its
   forked cache (the growing check watching, when it runs: `check.py`); the selector picks one
   (soft medoid) and its kind is read.
2. **judge** (`_judge`): the verifier's score routes the pick (keep / target check / reject); a
   checked step is kept when the target's check passes every token of it.
3. **keep** (`_keep`) commits the pick in both caches; otherwise **fall back** (`_fall_back`): the
   target verifies and finishes the step, or regenerates it (`fallback.py`).
4. **commit**: the request records the step (`Request.commit`) and returns its `StepRecord`.

The step runs on a `Pair` (`SpecGuardEngine` is one) and holds no state of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import Target, TentativePass
from specguard_core.decoding.grammar import GrammarIndex
from specguard_core.decoding.logprobs import token_scores
from specguard_core.decoding.proposal import Candidate, Proposal
from specguard_core.engine.accept import TokenRule
from specguard_core.engine.check import TargetCheck
from specguard_core.engine.fallback import generated, regenerate, speculate
from specguard_core.engine.judge import Judge
from specguard_core.engine.proposer import propose
from specguard_core.engine.request import Phases, Request, Step
from specguard_core.engine.selector import Selector
from specguard_core.engine.verify.verifier import Verdict
from specguard_core.text.steps import step_kind
from specguard_core.types import StepKind, StepRecord

# what becomes of the draft's step: kept as it is (by its score, or once the target's check passed
# all of it), or handed to the fallback
Outcome = Literal["kept", "target-checked", "fall back"]


class Pair(Protocol):
    """What a request runs on: the draft, the target and the judge between them, the
    response template that reads the pair's tool calls (`text.tool_calls.response_template`) and
    the token index of strict response formats (`decoding.grammar.GrammarIndex`)."""

    @property
    def draft(self) -> CachedModel: ...

    @property
    def target(self) -> Target: ...

    @property
    def judge(self) -> Judge: ...

    @property
    def context_window(self) -> int: ...

    @property
    def response_template(self) -> dict[str, Any] | None: ...

    @property
    def grammars(self) -> GrammarIndex: ...


@dataclass
class Drafted:
    """The draft's proposal, the candidate the selector picked, its kind (`step_kind`), and the
    target's check that watched it grow (None when none did)."""

    proposal: Proposal
    pick: int
    kind: tuple[StepKind, bool]
    check: TargetCheck | None

    @property
    def step(self) -> Candidate:
        return self.proposal.candidates[self.pick]


@dataclass
class Judged:
    """The verdict on the picked step, the target's pass over it (if one ran), what becomes of the
    step, the token rule that judged it, and how many leading tokens the target's check passed."""

    verdict: Verdict
    tpass: TentativePass | None
    outcome: Outcome
    rule: TokenRule | None  # None: the target did not check the step
    passed: int = 0


def run_step(pair: Pair, req: Request, selector: Selector) -> StepRecord:
    """One step of `req`: propose and pick, judge, keep or fall back, commit."""
    timed = Phases()
    drafted = _draft(pair, req, selector, timed)
    judged = _judge(pair, req, drafted, timed)
    if judged.outcome == "fall back":
        with timed("fallback"):
            step = _fall_back(pair, req, drafted, selector, judged.tpass, judged.passed)
    else:
        step = _keep(pair, req, drafted, judged.tpass, judged.verdict, judged.outcome)
    checked = judged.rule is not None and step.path != "regenerated"
    step.acceptance = judged.rule.name if checked and judged.rule else None
    return req.commit(step, judged.verdict, timed, drafted.step.text)


def _draft(pair: Pair, req: Request, selector: Selector, timed: Phases) -> Drafted:
    """The draft's k candidates (after it catches up), the selector's pick and its kind."""
    with timed("catch_up"):
        pair.draft.catch_up(req.draft)
    # the rule of a step not yet scored: an action's when it is the turn's first step
    check = TargetCheck.growing(pair.target, req, req.rule_for("reasoning"))
    with timed("propose"):
        proposal = propose(pair.draft, req.draft, pair.judge.draft_spec(req, selector),
                           req.generator, check=req.check, watch=check)
    if check is not None:  # its passes ran inside the proposal
        timed.move(check.seconds, "propose", "target_check")
    with timed("select"):
        pick = selector.select(proposal.candidates)
    kind = step_kind(proposal.candidates[pick].text, req.in_think, req.rules)
    return Drafted(proposal, pick, kind, check)


def _judge(pair: Pair, req: Request, drafted: Drafted, timed: Phases) -> Judged:
    """Score and route the picked step; a step routed to the target's check (the one that watched
    it grow, or one over the whole step) is kept when every token of a finished step passes."""
    step, watched = drafted.step, drafted.check
    with timed("score"):
        verdict, scored = pair.judge.score(req, step, drafted.kind[0])
    # an unfinished step (the watching check refused a token): only that refusal counts
    route = "check" if watched is not None and step.end == "refused" else verdict.route
    if watched is None and route != "check":
        return Judged(verdict, scored, "kept" if route == "keep" else "fall back", None)
    rule = req.rule_for(drafted.kind[0], verdict.score)
    ids, n_fed = pair.judge.checked_tokens(step)
    check = watched or TargetCheck.whole(pair.target, req, rule, scored)
    with timed("target_check"):
        tpass, passed = check.finish(ids, n_fed, rule)
    if route != "check":  # the verifier rejects the step the check watched
        return Judged(verdict, tpass, "fall back", None)
    kept = passed == len(ids) and step.end != "refused"
    reason = None if kept else "the target's check failed"
    return Judged(replace(verdict, route="check", reason=reason), tpass,
                  "target-checked" if kept else "fall back", rule, passed)


def _keep(pair: Pair, req: Request, drafted: Drafted, tpass: TentativePass | None,
          verdict: Verdict, path: Literal["kept", "target-checked"]) -> Step:
    """Commit the draft's step in both caches (the target's pass, when there was one, already
    encoded it)."""
    cand, proposal = drafted.step, drafted.proposal
    lps, tops = list(cand.logprobs), list(cand.top_logprobs)
    if tpass is not None and pair.judge.same_vocab:  # as the target's pass over them reads them
        lps, tops = token_scores(tpass.logits, cand.token_ids, req.top_logprobs)
    proposal.keep(drafted.pick)
    if tpass is not None:
        tpass.keep(len(tpass.ids))
    else:
        req.target.pending += pair.judge.convert(cand.fed, pair.draft, pair.target)
    return Step(cand.token_ids, cand.text, "draft", cand.end == "eos", len(proposal.candidates),
                verdict.tool_call, path=path, kind=drafted.kind,
                draft_written=len(cand.token_ids), draft_generated=generated(proposal),
                token_logprobs=list(lps), top_logprobs=tops, cut=cand.end == "budget")


def _fall_back(pair: Pair, req: Request, drafted: Drafted, selector: Selector,
               tpass: TentativePass | None, passed: int) -> Step:
    """Speculative fallback when the plan has it and no tool-call prefix is forced, keeping at
    least the `passed` tokens the target's check accepted; else the target regenerates the
    step."""
    if req.plan.fallback == "speculative" and not req.forced:
        tpass = tpass or pair.judge.target_pass(req, drafted.step)
        return speculate(pair.draft, pair.target, req, drafted.proposal, drafted.pick, tpass,
                         passed)
    if tpass is not None:
        tpass.discard()
    return regenerate(pair.draft, pair.target, req, drafted.proposal, selector,
                      pair.judge.convert)
