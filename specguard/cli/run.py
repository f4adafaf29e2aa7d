"""`specguard run`: answer one question and print the per-step trace as steps are committed.

Formatting of the trace lives here, not in the engine: the engine streams `StepRecord`s and this
module prints them.
"""

from __future__ import annotations

import argparse
from typing import Any

from specguard_core.config import PRESETS, NormBounds, SpecGuardConfig, parse_sets, preset
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.types import GenerationResult, StepRecord


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="answer one question and print the per-step trace")
    p.add_argument("question", help="the question (sent as one user message)")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help="draft model (default %(default)s)")
    p.add_argument("--target", default=DEFAULT_TARGET, help="target model (default %(default)s)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="fast")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    p.add_argument("--dtype", default="bfloat16", choices=["auto", "bfloat16", "float16",
                                                           "float32"])
    p.add_argument("--bounds", help="normaliser bounds JSON from `specguard calibrate`")
    p.add_argument("--verifier", help="'paper' (default) or a verifier card JSON from "
                   "`specguard verifier-train` (then r is the probe's P(step correct))")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--system", help="optional system message")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, repeatable (k=4, tau=0.6, temperature=0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead")
    p.set_defaults(func=cmd_run)


def _config(args: argparse.Namespace) -> SpecGuardConfig:
    overrides: dict[str, Any] = parse_sets(args.sets)
    if args.bounds:
        overrides["bounds"] = NormBounds.load(args.bounds)
    if args.verifier:
        overrides["verifier"] = args.verifier
    return preset(args.preset, max_new_tokens=args.max_new_tokens, **overrides)


def _print_step(console: Any, step: StepRecord) -> None:
    color = "green" if step.source == "draft" else "magenta"
    label = "draft kept " if step.source == "draft" else "target regen"
    scores = "" if step.score is None else (
        f"l={step.confidence:.2f} g={'-' if step.grounding is None else f'{step.grounding:.3f}'} "
        f"r={step.score:.2f}")
    head = f"[{color}]#{step.index:<2} {label}[/] [dim]{step.kind:9s} {scores} " \
        f"{step.latency_s:5.1f}s[/]"
    console.print(head, highlight=False)
    console.print(step.text.rstrip() or "[dim](end)[/]", markup=False, highlight=False)
    if step.rejected_reason:
        console.print(f"[dim]   rejected draft: {step.rejected_reason}[/]", highlight=False)


def _print_summary(console: Any, result: GenerationResult) -> None:
    s = result.stats
    rate = result.usage.completion_tokens / s.wall_time_s if s.wall_time_s else 0.0
    console.rule("summary")
    console.print(
        f"steps {s.steps} | accepted {s.steps_accepted} | regenerated {s.steps_regenerated} | "
        f"acceptance {s.acceptance_rate:.0%} | target tokens {s.target_token_fraction:.0%}\n"
        f"wall {s.wall_time_s:.1f}s | {result.usage.completion_tokens} tokens | {rate:.1f} tok/s | "
        f"prefilled draft {s.draft.prefilled} target {s.target.prefilled} | "
        f"finish {result.finish_reason}", highlight=False)
    for call in result.tool_calls + result.invalid_tool_calls:
        console.print(f"tool call {call.name} {call.arguments} {call.error or ''}", markup=False)


def cmd_run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from specguard_core.engine.loop import SpecGuardEngine

    console = Console(stderr=False)
    cfg = _config(args)
    with console.status(f"loading {args.draft} and {args.target} ..."):
        engine = SpecGuardEngine.from_pretrained(args.draft, args.target, device=args.device,
                                                 dtype=args.dtype, config=cfg)
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
        [{"role": "user", "content": args.question}]
    stream = engine.stream(messages)
    for step in stream:
        if not args.json:
            _print_step(console, step)
    if args.json:
        print(json.dumps(stream.result.to_dict(), indent=2))
    else:
        _print_summary(console, stream.result)
    return 0
