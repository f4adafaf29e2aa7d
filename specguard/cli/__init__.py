"""The `specguard` command: run (trace one question), models (offline cache), calibrate, bench.

The root of the command line sits above core and bench, so neither imports the other's CLI. Heavy
imports (torch, transformers) happen inside the handlers: `specguard --help` answers at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specguard.cli.models import add_models_parser
from specguard.cli.run import add_run_parser
from specguard.cli.verifier import add_verifier_parsers


def build_parser() -> argparse.ArgumentParser:
    from specguard_bench.cli import add_bench_parser, add_calibrate_parser

    parser = argparse.ArgumentParser(prog="specguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    add_models_parser(sub)
    add_calibrate_parser(sub)
    add_bench_parser(sub)
    add_verifier_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, FileNotFoundError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
