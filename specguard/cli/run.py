"""`specguard run`: answer one question and print the per-step trace as steps are committed.

Formatting of the trace lives here, not in the engine: the engine streams `StepRecord`s and this
module prints them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specguard_core.config import PRESETS, NormBounds, SpecGuardConfig, parse_sets, preset
from specguard_core.flags import ModelFlags
from specguard_core.models.options import LoadFlags, LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.types import GenerationResult, StepRecord

LOAD_FLAGS = LoadFlags(defaults={"dtype": "bfloat16"})  # `specguard run` and `specguard serve`
# the SpecGuardConfig fields with a flag of their own (any field: --set KEY=VALUE)
CONFIG_FLAGS = ModelFlags(SpecGuardConfig, fields=("max_new_tokens", "verifier", "bounds"),
                          types={"bounds": str}, metavars={"bounds": "PATH", "max_new_tokens": "N"},
                          default_help={"max_new_tokens": "none", "verifier": "the preset's",
                                        "bounds": "the preset's"})


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="answer one question and print the per-step trace")
    asked = p.add_mutually_exclusive_group(required=True)
    asked.add_argument("question", nargs="?", help="the question (sent as one user message); - "
                       "reads it from standard input (UTF-8, one final line break dropped)")
    asked.add_argument("-f", "--file", metavar="PATH",
                       help="read the question from a UTF-8 text file instead (its trailing line "
                       "breaks dropped), e.g. examples/janet.txt")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help="draft model (default %(default)s)")
    p.add_argument("--target", default=DEFAULT_TARGET, help="target model (default %(default)s)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="balanced",
                   help="the configuration (default %(default)s; docs/configuration.md)")
    p.add_argument("--system", help="optional system message")
    config = p.add_argument_group("configuration (over the preset)")
    CONFIG_FLAGS.add(config)
    config.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="any SpecGuardConfig field, repeatable (k=4, tau=0.6, "
                        "temperature=0); a flag above wins over --set")
    add_load_flags(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON instead")
    p.set_defaults(func=cmd_run)


def add_load_flags(p: argparse.ArgumentParser) -> None:
    """The loading flags (`LoadOptions`' fields), a target on a vLLM server's among them."""
    LOAD_FLAGS.add_groups(p, "remote target (a model on a vLLM server; docs/serving.md)")


def load_options(args: argparse.Namespace) -> LoadOptions:
    """The loading flags as `LoadOptions`; a bad value is a ValueError naming its flag."""
    return LOAD_FLAGS.parse(args)


def question(args: argparse.Namespace) -> str:
    """The question: the argument, standard input for "-" (without the line break that ends a
    file or an echo), or the text of `--file` (UTF-8; its line breaks read as "\\n", a byte-order
    mark and the trailing line breaks dropped); input that cannot be read is a ValueError saying
    why."""
    if args.file is None:
        return _stdin() if args.question == "-" else str(args.question)
    path = Path(args.file)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"--file {path}: no such file; give a text file holding the "
                         "question") from None
    except OSError as err:
        raise ValueError(f"--file {path}: cannot be read ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"--file {path} is not valid UTF-8 (byte 0x{raw[err.start]:02x} at offset "
                         f"{err.start}); save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")  # as text mode reads it


def _config(args: argparse.Namespace) -> SpecGuardConfig:
    overrides: dict[str, Any] = parse_sets(args.sets)
    flags = CONFIG_FLAGS.given(args)
    if "bounds" in flags:
        flags["bounds"] = NormBounds.load(flags["bounds"])
    return preset(args.preset, **{**overrides, **flags})


def _stdin() -> str:
    raw = sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"standard input is not valid UTF-8 (byte 0x{raw[err.start]:02x} at "
                         f"offset {err.start}); pass UTF-8 text") from None
    return text.removesuffix("\n").removesuffix("\r")


def _print_step(console: Any, step: StepRecord) -> None:
    from rich.markup import escape

    color = "green" if step.source == "draft" else "magenta"
    label = {"kept": "draft kept ", "target-checked": "draft checked", "target-verified":
             f"target +{step.target_written}", "regenerated": "target regen"}[step.path]
    scores = "" if step.score is None else (
        f"l={step.confidence:.2f} g={'-' if step.grounding is None else f'{step.grounding:.3f}'} "
        f"r={step.score:.2f}")
    head = f"[{color}]#{step.index:<2} {label}[/] [dim]{step.kind:9s} {scores} " \
        f"{step.latency_s:5.1f}s[/]"
    console.print(head, highlight=False)
    if step.text.strip():  # model text: printed as it is, never read as rich markup
        console.print(step.text.rstrip(), markup=False, highlight=False)
    else:
        console.print("[dim](end)[/]", highlight=False)
    if step.rejected_reason:
        console.print(f"[dim]   rejected draft: {escape(step.rejected_reason)}[/]",
                      highlight=False)


def _print_summary(console: Any, result: GenerationResult) -> None:
    s = result.stats
    rate = result.usage.completion_tokens / s.wall_time_s if s.wall_time_s else 0.0
    console.rule("summary")
    console.print(
        f"steps {s.steps} | kept {s.steps_kept} | target-checked {s.steps_target_checked} | "
        f"regenerated {s.steps_regenerated} | target passes {s.target_forward_passes} | "
        f"acceptance {s.acceptance_rate:.0%} | target tokens {s.target_token_fraction:.0%}\n"
        f"wall {s.wall_time_s:.1f}s | {result.usage.completion_tokens} tokens | {rate:.1f} tok/s | "
        f"prefilled draft {s.draft.prefilled} target {s.target.prefilled} | "
        f"finish {result.finish_reason}", highlight=False)
    for call in result.tool_calls + result.invalid_tool_calls:
        console.print(f"tool call {call.name} {call.arguments} {call.error or ''}", markup=False)
    for note in result.plan.get("notes", []):  # what the config asked for that did not run
        console.print(f"note: {note}", markup=False, highlight=False)


def cmd_run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.models.loading import resolve_device
    from specguard_core.text.chat import normalise_messages

    console = Console(stderr=False)
    cfg = _config(args)
    # bad input fails now, not after minutes of loading
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
        normalise_messages(question(args))
    normalise_messages(messages)
    load = load_options(args)
    resolve_device(load.device)
    target = load.target_url or args.target
    with console.status(f"loading {args.draft} and {target} ..."):
        engine = SpecGuardEngine.from_pretrained(args.draft, args.target, config=cfg, load=load)
    stream = engine.stream(messages)
    for step in stream:
        if not args.json:
            _print_step(console, step)
    if args.json:
        print(json.dumps(stream.result.to_dict(), indent=2))
    else:
        _print_summary(console, stream.result)
    return 0
