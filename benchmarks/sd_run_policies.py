"""Replay greedy token-level speculative decoding over a run's target texts, for any draft-run rule.

Greedy speculative decoding's cost on a text is fixed by two things per position: whether the
draft's argmax equals the target's token (the target's greedy text is its own argmax), and the
draft's probability of its argmax (what a run-stopping rule sees). One teacher-forced draft forward
over each target text gives both (`trace`); `replay` then counts, for a rule, the draft tokens and
target passes it would take, and charges them the measured seconds per draft token and per target
pass. (After a refused token the real draft continues from its own text; its probabilities there
are approximated by the teacher-forced ones: this only moves where a wasted run ends.)

    # 1. the trace: the draft's view of the `target` texts of a per-problem run (a few minutes;
    #    a stored run keeps its rows compressed: `xz -dk RUN/results.jsonl.xz` first)
    python benchmarks/sd_run_policies.py trace benchmarks/results/cascade-gsm8k-cpu1core-run3 \
        --out benchmarks/results/sd-run-policies/gsm8k-0-29.trace.json
    # 2. the rules, costed (seconds per draft token and per target pass from the same run:
    #    benchmarks/token_costs.py gives the draft's and the target's seconds per token)
    python benchmarks/sd_run_policies.py replay benchmarks/results/sd-run-policies/gsm8k-0-29.trace.json \
        --draft-s 0.130 --target-s 0.330

Rules: `hf` = transformers' assisted generation (20 tokens, the draft's confidence threshold 0.4,
refitted after every pass on the ROC of (probability, kept) with cost fpr + 3 fnr); `adaptive` =
SpecGuard's fallback (`sd_draft_tokens` 5, +2 when all kept, -1 otherwise, up to
`sd_max_draft_tokens`), optionally with `sd_confidence` (one token below p) or `sd_run_confidence`
(the product of the run's probabilities below p). With the run's `results.jsonl` at hand (or
`ends` in the trace), the replay also costs lossless `balanced` (`CheckRule`: the target's exact
check every `check_tokens` draft tokens, or earlier at `check_run_below`, then the fallback), with
the steps cut where the target's text has a blank line.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specguard_core.engine.speculative import draft_doubts


@dataclass
class Rule:
    """How long a draft run is. `kind`: "adaptive" (SpecGuard's fallback) or "hf"."""

    name: str
    kind: str = "adaptive"
    start: int = 5  # adaptive: first run length; hf: the fixed run length
    cap: int = 16
    confidence: float = 0.0  # end the run after a token below this probability
    run_confidence: float = 0.0  # end the run once the product of its probabilities is below this
    state: dict[str, Any] = field(default_factory=dict)

    def reset(self) -> None:
        self.state = {"g": self.start, "thr": self.confidence, "probs": [], "kept": []}

    def stop(self, probs: list[float]) -> bool:
        """After drafting `probs` (the run so far): end the run here?"""
        s = self.state
        if self.kind == "hf":
            return len(probs) >= self.start or probs[-1] < s["thr"]
        # the engine's own rule (`fallback._draft_run`), on log-probabilities as it sees them
        return len(probs) >= s["g"] or draft_doubts([math.log(p) for p in probs],
                                                    self.confidence, self.run_confidence)

    def update(self, probs: list[float], kept: int) -> None:
        """After the target's pass kept `kept` of the run's `len(probs)` tokens."""
        s = self.state
        if self.kind == "adaptive":
            s["g"] = min(self.cap, s["g"] + 2) if kept == len(probs) else max(1, s["g"] - 1)
            return
        if not self.confidence:
            return
        from sklearn.metrics import roc_curve  # as transformers' AssistedCandidateGenerator

        s["probs"] += probs
        s["kept"] += [1] * kept + ([0] if kept < len(probs) else [])
        del s["probs"][len(s["kept"]):]
        if len(s["probs"]) > 5 and {0, 1} <= set(s["kept"]):
            fpr, tpr, thresholds = roc_curve(s["kept"], s["probs"])
            s["thr"] = float(thresholds[int(np.argmin(fpr + 3 * (1 - tpr)))])


def draft_run(match: Sequence[bool], pmax: Sequence[float], i: int, stop: int,
              ends_run: Callable[[list[float]], bool]) -> tuple[list[float], int]:
    """One draft run from position `i` (never past `stop`): the probabilities of the tokens it
    drafted, and how many of them lead up to the first one that is not the target's."""
    probs: list[float] = []
    kept, ok = 0, True
    while i + len(probs) < stop:
        j = i + len(probs)
        probs.append(pmax[j])
        ok = ok and bool(match[j])
        kept += ok
        if ends_run(probs):
            break
    return probs, kept


def replay(match: Sequence[bool], pmax: Sequence[float], rule: Rule) -> tuple[int, int, int]:
    """(draft tokens drafted, target passes, drafted tokens the target cut) for greedy
    speculative decoding of one text whose position i has the draft's argmax equal to the
    target's token `match[i]`, with probability `pmax[i]`. Each pass commits the kept draft
    tokens and the target's own next token."""
    rule.reset()
    n, i, drafted, passes, wasted = len(match), 0, 0, 0, 0
    while i < n:
        probs, kept = draft_run(match, pmax, i, n, rule.stop)
        drafted += len(probs)
        passes += 1
        wasted += len(probs) - kept
        rule.update(probs, kept)
        i += kept + 1
    return drafted, passes, wasted


@dataclass
class CheckRule:
    """Lossless `balanced` (the target's `exact` check while the draft writes, then the fallback):
    per step, the draft writes runs of up to `check_tokens` tokens, ended early once the product
    of their probabilities falls below `run_below` (`experimental.check_run_below`); one target
    pass judges each run; at the first refused token the target's own token comes from that pass
    and `fallback` writes the rest of the step."""

    name: str
    check_tokens: int = 16
    run_below: float = 0.0
    fallback: Rule = field(default_factory=lambda: Rule("fallback", run_confidence=0.7))

    def ends_run(self, probs: list[float]) -> bool:
        """After drafting `probs` (the run so far): judge the run here?"""
        return len(probs) >= self.check_tokens or draft_doubts(
            [math.log(p) for p in probs], 0.0, self.run_below)


def replay_check(match: Sequence[bool], pmax: Sequence[float], ends: Sequence[int],
                 rule: CheckRule) -> tuple[int, int, int]:
    """`replay` for a `CheckRule` over one text whose steps end after the positions `ends`."""
    drafted = passes = wasted = 0
    start = 0
    for end in [*ends, len(match) - 1]:
        i, stop = start, end + 1
        start = stop
        while i < stop:
            probs, kept = draft_run(match, pmax, i, stop, rule.ends_run)
            drafted, passes, wasted = drafted + len(probs), passes + 1, wasted + len(probs) - kept
            if kept < len(probs):  # refused: the pass gives the target's token; the fallback goes on
                i += kept + 1
                if i < stop:
                    d, p, w = replay(match[i:stop], pmax[i:stop], rule.fallback)
                    drafted, passes, wasted = drafted + d, passes + p, wasted + w
                break
            i += kept
    return drafted, passes, wasted


def step_ends(run_dir: Path, draft: str, delimiter: str = "\n\n") -> dict[str, list[int]]:
    """Per `target` text of the run in `run_dir`: the token positions after which a step ends (the
    decoded text since the last end holds `delimiter`), tokenised as `trace` tokenises it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(draft)
    out: dict[str, list[int]] = {}
    for line in (run_dir / "results.jsonl").open():
        row = json.loads(line)
        if row["method"] != "target":
            continue
        ids = tok(row["text"], add_special_tokens=False)["input_ids"]
        ends, since = [], 0
        for i in range(len(ids)):
            if delimiter in tok.decode(ids[since:i + 1]):
                ends.append(i)
                since = i + 1
        out[row["uid"]] = ends
    return out


def cost(traces: list[dict[str, Any]], rule: Rule | CheckRule, draft_s: float, target_s: float
         ) -> dict[str, float]:
    """Seconds per problem and per token, and the counts behind them, over `traces`."""
    drafted = passes = wasted = tokens = 0
    for tr in traces:
        d, p, w = (replay_check(tr["match"], tr["pmax"], tr["ends"], rule)
                   if isinstance(rule, CheckRule) else replay(tr["match"], tr["pmax"], rule))
        drafted, passes, wasted = drafted + d, passes + p, wasted + w
        tokens += len(tr["match"])
    seconds = drafted * draft_s + passes * target_s
    n = len(traces)
    return {"s_per_problem": seconds / n, "s_per_token": seconds / tokens,
            "tokens_per_pass": tokens / passes, "wasted_per_problem": wasted / n}


RULES = [
    Rule("hf: transformers' assisted generation", kind="hf", start=20, confidence=0.4),
    Rule("adaptive (the fallback without sd_run_confidence)"),
    Rule("adaptive + sd_confidence 0.4", confidence=0.4),
    *[Rule(f"adaptive, cap 32 + sd_run_confidence {c}", cap=32, run_confidence=c)
      for c in (0.3, 0.5, 0.6, 0.7, 0.8)],
    *[Rule(f"adaptive + sd_run_confidence {c}", run_confidence=c) for c in (0.5, 0.7)],
]
CHECK_RULES = [
    CheckRule("lossless balanced: check every 16 draft tokens"),
    *[CheckRule(f"lossless balanced: every 16, check_run_below {c}", run_below=c)
      for c in (0.5, 0.6, 0.7, 0.8)],
    CheckRule("lossless balanced: every 32, check_run_below 0.7", check_tokens=32, run_below=0.7),
    CheckRule("lossless balanced: every 8 draft tokens", check_tokens=8),
]


def trace(run_dir: Path, out: Path, model: str | None, dtype: str) -> None:
    """Teacher-forced draft pass over each `target` text of the run in `run_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specguard_bench.reasoning.problems import load_problems, messages_for
    from specguard_core.models.registry import resolve

    settings = json.loads((run_dir / "run.json").read_text())
    path = resolve(model or settings["draft"])
    tok = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").open()]
    texts = {r["uid"]: r for r in rows if r["method"] == "target"}
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    traces = []
    for uid, row in sorted(texts.items(), key=lambda kv: int(kv[1]["index"])):
        (problem,) = load_problems(row["dataset"], 1, int(row["index"]))
        prompt = tok.apply_chat_template(messages_for(problem.question), tokenize=False,
                                         add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        t_ids = tok(row["text"], add_special_tokens=False)["input_ids"]
        t_ids += [eos] if row["finish_reason"] == "stop" else []
        with torch.inference_mode():
            logits = lm(torch.tensor([p_ids + t_ids])).logits[0, len(p_ids) - 1:-1]  # [T, V]
        top = logits.float().softmax(-1).max(-1)
        traces.append({"uid": uid, "match": (top.indices == torch.tensor(t_ids)).tolist(),
                       "pmax": [round(p, 5) for p in top.values.tolist()]})
        print(uid, len(t_ids), f"draft argmax = target token at {np.mean(traces[-1]['match']):.3f}",
              flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run": str(run_dir), "draft": str(path), "traces": traces}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trace")
    t.add_argument("run_dir", type=Path)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--draft", help="the draft (default: the run's)")
    t.add_argument("--dtype", default="bfloat16")
    r = sub.add_parser("replay")
    r.add_argument("trace", type=Path)
    r.add_argument("--draft-s", type=float, required=True, help="seconds per draft token")
    r.add_argument("--target-s", type=float, required=True, help="seconds per target pass")
    args = ap.parse_args()
    if args.cmd == "trace":
        trace(args.run_dir, args.out, args.draft, args.dtype)
        return
    stored = json.loads(args.trace.read_text())
    traces = stored["traces"]
    print(f"{len(traces)} texts, {sum(len(t['match']) for t in traces)} tokens; "
          f"draft {args.draft_s} s/token, target {args.target_s} s/pass\n")
    print("| rule | s/problem | s/token | tokens/pass | wasted draft tokens/problem |")
    print("|---|---|---|---|---|")
    print(f"| target alone | {args.target_s * sum(len(t['match']) for t in traces) / len(traces):.1f}"
          f" | {args.target_s:.3f} | 1 | 0 |")
    run_dir = Path(stored["run"])
    if all("ends" in t for t in traces) or (run_dir / "results.jsonl").exists():
        if not all("ends" in t for t in traces):
            ends = step_ends(run_dir, stored["draft"])
            for t in traces:
                t["ends"] = ends[t["uid"]]
        rules: list[Rule | CheckRule] = [*RULES, *CHECK_RULES]
    else:
        rules = list(RULES)
    for rule in rules:
        c = cost(traces, rule, args.draft_s, args.target_s)
        print(f"| {rule.name} | {c['s_per_problem']:.1f} | {c['s_per_token']:.3f} | "
              f"{c['tokens_per_pass']:.2f} | {c['wasted_per_problem']:.0f} |")


if __name__ == "__main__":
    main()
