"""The `specguard` command line (`main`); each subcommand's parser and handler live beside it."""

# The root of the command line sits above core and bench, so neither imports the other's CLI.
# Heavy imports (torch, transformers) happen inside the handlers: `specguard --help` answers at once.

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specguard.cli.models import add_models_parser
from specguard.cli.run import add_run_parser
from specguard.cli.serve import add_serve_parser
from specguard.cli.verifier import add_verifier_parsers
from specguard_core.flags import error_line

DESCRIPTION = ("SpecGuard: a small draft model proposes each reasoning step, a verifier decides "
               "from the draft's internals whether to keep it, and the large target model writes "
               "the steps it rejects. `specguard COMMAND --help` describes each command.")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specguard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    from specguard_bench.cli.parsers import add_bench_parser, add_calibrate_parser

    parser = argparse.ArgumentParser(prog="specguard", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    add_models_parser(sub)
    add_calibrate_parser(sub)
    add_bench_parser(sub)
    add_serve_parser(sub)
    add_verifier_parsers(sub)
    return parser


def _undecodable(argv: Sequence[str]) -> str | None:
    """An error line for the first argument that is not valid UTF-8 (Python keeps undecodable
    bytes as lone surrogates, which no tokenizer or terminal accepts), else None."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as err:
            raw = arg.encode("utf-8", "surrogateescape")
            byte = raw[len(arg[:err.start].encode("utf-8")):][:1]
            shown = raw.decode("utf-8", "backslashreplace")
            return (f"argument {i} ('{shown[:60]}') is not valid UTF-8 (byte 0x{byte.hex()}); "
                    "pass UTF-8 text (check the terminal's or file's encoding)")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; bad input, missing or damaged models and failed fetches print one
    `error: ...` line and return 2 (never a traceback)."""
    from specguard_core.models.registry import ModelFetchError

    argv = list(sys.argv[1:] if argv is None else argv)
    if problem := _undecodable(argv):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, OSError, ModelFetchError) as err:  # FileNotFoundError is an OSError
        print(f"error: {error_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
