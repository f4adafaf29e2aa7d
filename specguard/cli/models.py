"""`specguard models fetch|list`: the offline model cache from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.filesize import decimal

from specguard_core.models.registry import (
    CACHE_ENV,
    DEFAULT_DTYPE,
    DEFAULT_FETCH,
    DTYPES,
    REGISTRY,
    cache_dir,
    cached_folder,
    damaged_folder,
    list_cached,
)


def add_models_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register `models fetch [names...]` and `models list`; handlers are set as `func`
    (call `args.func(args)`, which returns an exit status)."""
    parser = subparsers.add_parser("models", help="offline model cache (GGUF bundles)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"cache root (default: ${CACHE_ENV} or ~/.cache/specguard/models)",
    )
    sub = parser.add_subparsers(dest="models_command", required=True)
    p_fetch = sub.add_parser("fetch", help="download, verify and convert model bundles")
    p_fetch.add_argument(
        "names",
        nargs="*",
        default=list(DEFAULT_FETCH),
        help="registry names, aliases or HF ids (default: qwen0.5b qwen1.5b)",
    )
    p_fetch.add_argument("--dtype", choices=DTYPES, default=DEFAULT_DTYPE)
    p_fetch.add_argument("--no-progress", action="store_true")
    p_fetch.set_defaults(func=cmd_models_fetch)
    p_list = sub.add_parser("list", help="show registered bundles and what is cached")
    p_list.set_defaults(func=cmd_models_list)
    return parser


def cmd_models_fetch(args: argparse.Namespace) -> int:
    """Handler of `specguard models fetch`: prints `name<TAB>folder` per bundle. An unknown name
    is a ValueError and a failed fetch a ModelFetchError (`main` prints either as one line)."""
    from specguard_core.models.fetch import fetch

    try:
        paths = fetch(args.names, args.dtype, not args.no_progress, root=args.cache_dir)
    except KeyError as exc:  # an unknown name: bad input, as in every other command
        raise ValueError(exc.args[0]) from None
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


def cmd_models_list(args: argparse.Namespace) -> int:
    """Handler of `specguard models list`: the registry, then every cached artefact."""
    root = args.cache_dir or cache_dir()
    print(f"registry (fetch with `specguard models fetch NAME`), cache: {root}")
    for bundle in REGISTRY.values():
        damaged = damaged_folder(bundle, root)
        state = "cached" if cached_folder(bundle, None, root) else \
            f"damaged ({damaged[1]}): `specguard models fetch {bundle.name}` repairs it" \
            if damaged else "not cached"
        print(f"  {bundle.name:30s} {', '.join(bundle.aliases):10s} {bundle.hf_id:40s} {state}")
    cached = list_cached(root)
    print("cached:" if cached else "cached: nothing yet")
    for item in cached:
        kind = "gguf" if item.path.is_file() else "hf"
        print(f"  {item.name:42s} {kind:4s} {decimal(item.size_bytes):>9s}  {item.path}")
    return 0
