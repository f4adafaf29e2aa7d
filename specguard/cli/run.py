"""`specguard run`: answer one question and print the per-step trace as steps are committed.

Formatting of the trace lives here, not in the engine: the engine streams `StepRecord`s and this
module prints them.
"""

from __future__ import annotations

import argparse
from typing import Any

from specguard_core.config import PRESETS, NormBounds, SpecGuardConfig, parse_sets, preset
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.remote.load import add_target_flags, target_flags
from specguard_core.types import GenerationResult, StepRecord

_DTYPES = ["auto", "bfloat16", "float16", "float32"]


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="answer one question and print the per-step trace")
    p.add_argument("question", help="the question (sent as one user message)")
    p.add_argument("--draft", default=DEFAULT_DRAFT, help="draft model (default %(default)s)")
    p.add_argument("--target", default=DEFAULT_TARGET, help="target model (default %(default)s)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="balanced")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    p.add_argument("--dtype", default="bfloat16", choices=_DTYPES)
    add_loader_flags(p)
    add_remote_flags(p)
    p.add_argument("--bounds", help="normaliser bounds JSON from `specguard calibrate`")
    p.add_argument("--verifier", help="'auto' (default: the card shipped for the draft, else "
                   "'paper'), 'paper', or a verifier card JSON from `specguard verifier-train` "
                   "(with a card r is the probe's P(step correct))")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--system", help="optional system message")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, repeatable (k=4, tau=0.6, temperature=0)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead")
    p.set_defaults(func=cmd_run)


def add_loader_flags(p: argparse.ArgumentParser) -> None:
    """Loader options passed through to transformers' `from_pretrained` for both models, and the
    per-model device/dtype overrides."""
    g = p.add_argument_group("loading")
    g.add_argument("--draft-device", help="device of the draft only (overrides --device)")
    g.add_argument("--target-device", help="device of the target only (overrides --device)")
    g.add_argument("--draft-dtype", choices=_DTYPES, help="dtype of the draft only (overrides "
                   "--dtype)")
    g.add_argument("--target-dtype", choices=_DTYPES, help="dtype of the target only "
                   "(overrides --dtype)")
    g.add_argument("--device-map", help='transformers device_map, e.g. "auto" (needs accelerate)')
    g.add_argument("--max-memory", metavar="JSON",
                   help='per-device memory cap with --device-map, e.g. \'{"0": "20GiB"}\'')
    g.add_argument("--revision", help="model revision (branch, tag or commit) for hub ids")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="let transformers run Python code shipped in the model folders (off by "
                        "default: such a model is refused)")
    g.add_argument("--quantize", choices=["4bit", "8bit"],
                   help="load both models quantized with bitsandbytes (CUDA)")


def add_remote_flags(p: argparse.ArgumentParser) -> None:
    """A target on a vLLM server instead of an in-process one (see README, "Remote target")."""
    add_target_flags(p.add_argument_group("remote target (a model on a vLLM server)"),
                     "the target's OpenAI-compatible API, e.g. http://HOST:8000/v1 (replaces "
                     "--target; the draft still runs here)")


def remote_options(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """(the target: --target-url or --target, the remote keywords for `from_pretrained`); a
    remote flag without --target-url is a ValueError that says so."""
    options = target_flags(args)
    return (args.target, {}) if options is None else (args.target_url, options)


def loader_options(args: argparse.Namespace) -> dict[str, Any]:
    """The loading flags as `SpecGuardEngine.from_pretrained` keywords; bad values are a
    ValueError that names the flag."""
    import json

    max_memory = None
    if args.max_memory:
        try:
            raw = json.loads(args.max_memory)
        except json.JSONDecodeError as err:
            raise ValueError(f"--max-memory must be a JSON object: {err}") from None
        if not isinstance(raw, dict):
            raise ValueError('--max-memory must be a JSON object like {"0": "20GiB"}')
        max_memory = {int(k) if str(k).isdigit() else k: v for k, v in raw.items()}
    quantization = None
    if args.quantize:
        from transformers import BitsAndBytesConfig

        quantization = BitsAndBytesConfig(load_in_4bit=args.quantize == "4bit",
                                          load_in_8bit=args.quantize == "8bit")
    return {"device_map": args.device_map, "max_memory": max_memory, "revision": args.revision,
            "trust_remote_code": bool(args.trust_remote_code),
            "quantization_config": quantization, "draft_device": args.draft_device,
            "target_device": args.target_device, "draft_dtype": args.draft_dtype,
            "target_dtype": args.target_dtype}


def _config(args: argparse.Namespace) -> SpecGuardConfig:
    overrides: dict[str, Any] = parse_sets(args.sets)
    if args.bounds:
        overrides["bounds"] = NormBounds.load(args.bounds)
    if args.verifier:
        overrides["verifier"] = args.verifier
    return preset(args.preset, max_new_tokens=args.max_new_tokens, **overrides)


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
        normalise_messages(args.question)
    normalise_messages(messages)
    device = resolve_device(args.device)
    target, remote = remote_options(args)
    options = loader_options(args)
    with console.status(f"loading {args.draft} and {target} ..."):
        engine = SpecGuardEngine.from_pretrained(args.draft, target, device=device,
                                                 dtype=args.dtype, config=cfg, **options, **remote)
    stream = engine.stream(messages)
    for step in stream:
        if not args.json:
            _print_step(console, step)
    if args.json:
        print(json.dumps(stream.result.to_dict(), indent=2))
    else:
        _print_summary(console, stream.result)
    return 0
