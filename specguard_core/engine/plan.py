"""A request's plan: which path its steps take, decided once from its config and the pair.

`make_plan` runs when a request opens (`run/start.py`), before any model does; every step reads
the plan's fields instead of deciding again from config strings and facts about the pair:

- `route`: "score" (the verifier's score keeps, checks or rejects a step) or "check" (the target
  checks every step);
- `check`: how a step routed to the target's check is checked: "growing" (while the draft writes
  it, every `check_every` tokens or sooner when the draft doubts itself), "whole" (once it is
  written), or "none" (no step reaches the check);
- `fallback`: who finishes a refused step: "speculative" (the target verifies the draft's tokens
  and finishes the step with the draft's help), "greedy" or "sample" (the target writes it,
  `fallback_samples` candidates);
- `guesses`: prompt-lookup guesses fed with each draft forward (0: none) in the fallback's draft
  runs, and in step proposals when `guess_proposals`;
- `capture` / `pool`: the scoring model's attention layers grounding reads, the hidden layers a
  verifier card reads;
- `step_rule` / `action_rule`: the token rules (`accept.py`) for reasoning and answer steps, and
  for actions (a tool call, or the turn's first step when tools are offered).

What the config asks for that this pair or config cannot run is off, with the reason in `notes`
(recorded on the result: `GenerationResult.plan`); a mode the config set explicitly that is off
gets one warning.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Literal

from specguard_core.config import SpecGuardConfig
from specguard_core.engine.accept import Rules, TokenRule


@dataclass(frozen=True)
class PairFacts:
    """What the plan needs to know of the pair: ids pass between the models as they are
    (`same_vocab`); the target can grow a tentative pass (`target_grows`: in-process or served);
    the scoring model's `capture` layers (None: the verifier reads no grounding) and `pool` layers
    (what a card reads); the prompt-lookup guesses that pay on the draft's backend (`guesses`,
    what `draft_lookahead=None` means)."""

    same_vocab: bool
    target_grows: bool
    guesses: int
    capture: frozenset[int] | None
    pool: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    route: Literal["score", "check"]
    check: Literal["none", "whole", "growing"]
    check_every: int  # growing: judge after this many unjudged draft tokens (0 otherwise)
    fallback: Literal["speculative", "greedy", "sample"]
    fallback_samples: int  # the target's candidates per refused step it writes
    guesses: int  # prompt-lookup guesses per draft forward (0: none)
    guess_proposals: bool  # step proposals feed them too (one candidate, no attention capture)
    scoring: Literal["draft", "target"]  # whose internals the verifier reads
    capture: frozenset[int] | None  # the scoring model's layers whose attention rows grounding reads
    pool: tuple[int, ...]  # the scoring model's hidden layers a verifier card reads
    step_rule: TokenRule  # reasoning and answer steps
    action_rule: TokenRule  # tool calls, and the turn's first step when tools are offered
    check_actions: bool  # the target checks every action, whatever its score (exact actions)
    notes: tuple[str, ...] = ()  # what the config asked for that is off, and why

    def grows(self, rule: TokenRule, temperature: float) -> bool:
        """Whether a step judged by `rule` is checked while the draft writes it: the plan's check
        grows and the rule can pass a token at this temperature (`exact` passes none when
        sampling: the fallback's speculative sampling judges those tokens instead)."""
        return self.check == "growing" and (temperature == 0 or rule.passes_sampled)

    def record(self) -> dict[str, Any]:
        """The plan as plain data, for the result and its trace."""
        return {"route": self.route, "check": self.check, "check_every": self.check_every,
                "fallback": self.fallback, "guesses": self.guesses,
                "guess_proposals": self.guess_proposals, "scoring": self.scoring,
                "grounding": self.capture is not None, "step_rule": self.step_rule.name,
                "action_rule": self.action_rule.name, "notes": list(self.notes)}


def make_plan(cfg: SpecGuardConfig, pair: PairFacts, rules: Rules, tools: bool) -> Plan:
    """The plan of a request under `cfg` on `pair` (`rules`: the engine's token rules; `tools`:
    tools are offered). Warns once for each mode `cfg` set explicitly that is off."""
    notes: list[str] = []
    asked = cfg.model_fields_set
    fallback = cfg.fallback
    if fallback == "speculative" and not pair.same_vocab:
        fallback = "greedy"
        notes.append("speculative fallback off: the models' vocabularies differ (the target "
                     "writes refused steps greedily)")
    step_rule = rules[cfg.acceptance]
    action_rule = rules["exact"] if cfg.action_acceptance == "exact" else step_rule
    check = _check(cfg, pair, tools, fallback, step_rule, notes)
    by_draft = cfg.experimental.scoring_model == "draft"  # the draft captures what scores it
    guesses = pair.guesses if cfg.draft_lookahead is None else cfg.draft_lookahead
    guess_proposals = guesses > 0 and cfg.k == 1 and not (by_draft and pair.capture)
    if guesses > 0 and not guess_proposals:
        why = f"k={cfg.k} candidates" if cfg.k > 1 else "attention is captured for grounding"
        notes.append(f"prompt-lookup guesses off in step proposals: {why}")
    plan = Plan(route=cfg.route, check=check, check_every=cfg.check_tokens if check == "growing"
                else 0, fallback=fallback, fallback_samples=cfg.fallback_samples
                if fallback == "sample" else 1, guesses=guesses,
                guess_proposals=guess_proposals, scoring=cfg.experimental.scoring_model,
                capture=pair.capture, pool=pair.pool, step_rule=step_rule,
                action_rule=action_rule, check_actions=cfg.action_acceptance == "exact",
                notes=tuple(notes))
    for note in notes:
        field = "fallback" if note.startswith("speculative") else \
            "check_tokens" if note.startswith("growing") else "draft_lookahead"
        if field in asked:
            warnings.warn(f"SpecGuard: {note}", UserWarning, stacklevel=5)  # at `stream`'s caller
    return plan


def _check(cfg: SpecGuardConfig, pair: PairFacts, tools: bool, fallback: str, rule: TokenRule,
           notes: list[str]) -> Literal["none", "whole", "growing"]:
    """How a step routed to the target's check is checked (see `Plan`)."""
    accept_at, reject_below = cfg.thresholds
    if cfg.route == "score" and accept_at == reject_below and not tools:
        return "none"  # the paper's two-way rule: keep or reject, never check
    if cfg.check_tokens == 0:
        return "whole"
    why = _why_not_growing(cfg, pair, fallback, rule)
    if why:
        notes.append(f"growing check off: {why} (each step is checked once it is written)")
        return "whole"
    return "growing"


def _why_not_growing(cfg: SpecGuardConfig, pair: PairFacts, fallback: str,
                     rule: TokenRule) -> str | None:
    """Why the check of a reasoning or answer step (judged by `rule`) cannot grow while the draft
    writes (None: it can; an action's own rule is asked again per step, `Plan.grows`)."""
    if cfg.route != "check":
        return "route='score' (it runs when the target checks every step)"
    if cfg.k != 1:
        return f"k={cfg.k} candidates (it watches one)"
    if fallback != "speculative":
        return ("the models' vocabularies differ" if not pair.same_vocab
                else f"fallback={fallback!r} (a refused step is rewritten, not finished)")
    if cfg.experimental.scoring_model != "draft":
        return "the target scores each step"
    if not pair.target_grows:
        return "this target cannot grow a pass"
    if cfg.temperature > 0 and not rule.passes_sampled:
        return (f"acceptance={rule.name!r} passes no token when sampling (the fallback's "
                "speculative sampling judges them)")
    return None
