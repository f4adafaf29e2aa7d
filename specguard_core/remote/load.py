"""Loading a pair whose target is served by vLLM: `SpecGuardEngine.from_pretrained(draft,
"http://HOST:PORT/v1", target_model=NAME)` comes here (see `target.py` for the target itself).

The draft loads as any model does (`models.loading.load_model`); the target's tokenizer is read
from local files only, and the server is asked what it serves and checked against it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from specguard_core.config import EngineConfig, SpecGuardConfig, default_config

REMOTE_OPTIONS = ("target_model", "target_tokenizer", "target_timeout", "target_api_key",
                  "target_top_logprobs")


TARGET_KEY_ENV = "SPECGUARD_TARGET_API_KEY"


def add_target_flags(group: argparse._ArgumentGroup, url_help: str) -> None:
    """The command-line flags of a served target (`specguard run`/`serve`/`bench` share them):
    --target-url (`url_help` says what it does there), --target-model, --target-tokenizer,
    --target-timeout, --target-api-key (default: $SPECGUARD_TARGET_API_KEY)."""
    group.add_argument("--target-url", metavar="URL", help=url_help)
    group.add_argument("--target-model", metavar="NAME", help="the served model's name (default: "
                       "the only one the server serves)")
    group.add_argument("--target-tokenizer", metavar="PATH", help="local folder (or cached name) "
                       "of the served model's tokenizer (default: the served name if cached, else "
                       "the draft's)")
    group.add_argument("--target-timeout", type=float, metavar="SECONDS",
                       help="seconds to wait for each server answer (default 120)")
    group.add_argument("--target-api-key", default=os.environ.get(TARGET_KEY_ENV), metavar="KEY",
                       help=f"the server's API key (default: ${TARGET_KEY_ENV}, else none)")


def target_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The served target's keywords for `from_pretrained` from `add_target_flags`' flags (None
    without --target-url); a flag given without --target-url is a ValueError that says so."""
    given = {"target_model": args.target_model, "target_tokenizer": args.target_tokenizer,
             "target_timeout": args.target_timeout}
    if not args.target_url:
        if flags := [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None]:
            raise ValueError(f"{', '.join(flags)} needs --target-url (a target on a vLLM server)")
        return None
    options = {k: v for k, v in given.items() if v is not None}
    if args.target_api_key:
        options["target_api_key"] = args.target_api_key
    return options


def is_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


def load_remote_engine(cls: Any, draft: str, target_url: str, *, target_model: str | None = None,
                       target_tokenizer: str | None = None, target_timeout: float = 120.0,
                       target_api_key: str | None = None, target_top_logprobs: int = 20,
                       config: SpecGuardConfig | None = None,
                       engine_config: EngineConfig | None = None, preset: str | None = None,
                       **options: Any) -> Any:
    """The draft loaded here (`options`: `load_model`'s) and the target served at `target_url`.

    The target's tokenizer is read from local files, never from the hub: `target_tokenizer` (a
    folder or cached name), else the served model's name when it names a local model, else the
    draft's own. The server is asked first (`RemoteTarget.connect` checks that it serves
    `target_model` and tokenizes as that tokenizer does), so a wrong URL fails before the draft's
    weights load."""
    from specguard_core.config import preset as make_preset
    from specguard_core.models.loading import load_model
    from specguard_core.remote.target import RemoteTarget  # torch: not at import (the CLI parsers)

    cfg = config or (make_preset(preset) if preset else default_config())
    options = draft_options(options)
    found = _local_tokenizer(target_tokenizer, strict=True) if target_tokenizer else None
    found = found or _local_tokenizer(target_model) or _local_tokenizer(draft)
    d_model: Any = None
    d_tok: Any = None
    if found is None:  # e.g. a .gguf draft: its tokenizer comes with the model
        d_model, d_tok = load_model(draft, **options)
        found = (d_tok, d_model.generation_config)
    tokenizer, gen = found
    eos = getattr(gen, "eos_token_id", None)
    eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) + [tokenizer.eos_token_id]
               if e is not None]
    remote = RemoteTarget.connect(target_url, target_model, tokenizer, eos_ids=eos_ids,
                                  timeout_s=target_timeout, top_logprobs=target_top_logprobs,
                                  api_key=target_api_key)
    if d_model is None:
        d_model, d_tok = load_model(draft, **options)
    if d_tok.get_vocab() == tokenizer.get_vocab():  # logits rows as wide as the draft's
        width = getattr(d_model.config.get_text_config(), "vocab_size", None)
        remote.vocab_size = max(remote.vocab_size, int(width or 0))
    return cls(d_model, d_tok, remote, config=cfg, engine_config=engine_config,
               name=f"specguard:{Path(draft).name}+{remote.model_name}")


def draft_options(options: dict[str, Any]) -> dict[str, Any]:
    """`load_model`'s options for the draft: `draft_device` / `draft_dtype` override `device` /
    `dtype`; a target placement option is a ValueError (the server places the target)."""
    options = dict(options)
    for key in ("target_device", "target_dtype"):
        if options.pop(key, None) is not None:
            raise ValueError(f"{key} places an in-process target; a target on a vLLM server is "
                             "placed by the server (vllm serve --device / --dtype)")
    for key in ("device", "dtype"):
        own = options.pop(f"draft_{key}", None)
        if own is not None:
            options[key] = own
    return options


def _local_tokenizer(ref: str | None, strict: bool = False) -> tuple[Any, Any] | None:
    """(tokenizer, generation config or None) from the local files `ref` names, else None (or,
    when `strict`, an OSError that says what to pass)."""
    from transformers import GenerationConfig

    from specguard_core.models.loading import local_source, local_tokenizer

    if not ref:
        return None
    try:  # files on disk only: never a request to the hub, not even a lookup
        tokenizer = local_tokenizer(ref)
    except (OSError, ValueError) as err:
        if strict:
            raise OSError(f"target_tokenizer {ref!r} is not available locally ({err}); pass the "
                          "served model's folder (or `specguard models fetch` it)") from None
        return None
    source = local_source(ref)
    try:
        gen = GenerationConfig.from_pretrained(source[0], local_files_only=True) if source \
            else None
    except (OSError, ValueError):
        gen = None
    return tokenizer, gen
