"""Loading a pair whose target is served by vLLM: `SpecGuardEngine.from_pretrained(draft,
"http://HOST:PORT/v1", target_model=NAME)` comes here (see `target.py` for the target itself).

The draft loads as any model does (`models.loading.load_model`); the target's tokenizer is read
from local files only, and the server is asked what it serves and checked against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specguard_core.config import EngineConfig, SpecGuardConfig, default_config
from specguard_core.models.options import LoadOptions


def is_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


def load_remote_engine(cls: Any, draft: str, target_url: str, *, load: LoadOptions,
                       config: SpecGuardConfig | None = None,
                       engine_config: EngineConfig | None = None, preset: str | None = None,
                       progress: bool = True) -> Any:
    """The draft loaded here (with `load`'s options for the draft) and the target served at
    `target_url` (with `load`'s `target_*` options).

    The target's tokenizer is read from local files, never from the hub: `target_tokenizer` (a
    folder or cached name), else the served model's name when it names a local model, else the
    draft's own. The server is asked first (`RemoteTarget.connect` checks that it serves
    `target_model` and tokenizes as that tokenizer does), so a wrong URL fails before the draft's
    weights load."""
    from specguard_core.config import preset as make_preset
    from specguard_core.models.loading import load_model
    from specguard_core.remote.target import RemoteTarget  # torch: not at import (the CLI parsers)

    cfg = config or (make_preset(preset) if preset else default_config())
    options = draft_options(load, progress)
    found = _local_tokenizer(load.target_tokenizer, strict=True) if load.target_tokenizer \
        else None
    found = found or _local_tokenizer(load.target_model) or _local_tokenizer(draft)
    d_model: Any = None
    d_tok: Any = None
    if found is None:  # e.g. a .gguf draft: its tokenizer comes with the model
        d_model, d_tok = load_model(draft, **options)
        found = (d_tok, d_model.generation_config)
    tokenizer, gen = found
    eos = getattr(gen, "eos_token_id", None)
    eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) + [tokenizer.eos_token_id]
               if e is not None]
    key = load.target_api_key.get_secret_value() if load.target_api_key else None
    remote = RemoteTarget.connect(target_url, load.target_model, tokenizer, eos_ids=eos_ids,
                                  timeout_s=load.target_timeout,
                                  top_logprobs=load.target_top_logprobs, api_key=key)
    if d_model is None:
        d_model, d_tok = load_model(draft, **options)
    if d_tok.get_vocab() == tokenizer.get_vocab():  # logits rows as wide as the draft's
        width = getattr(d_model.config.get_text_config(), "vocab_size", None)
        remote.vocab_size = max(remote.vocab_size, int(width or 0))
    return cls(d_model, d_tok, remote, config=cfg, engine_config=engine_config,
               name=f"specguard:{Path(draft).name}+{remote.model_name}")


def draft_options(load: LoadOptions, progress: bool = True) -> dict[str, Any]:
    """`load_model`'s keywords for the draft (`draft_device` / `draft_dtype` over `device` /
    `dtype`); a target placement option is a ValueError (the server places the target)."""
    from specguard_core.models.loading import model_options

    for key in ("target_device", "target_dtype"):
        if getattr(load, key) is not None:
            raise ValueError(f"{key} places an in-process target; a target on a vLLM server is "
                             "placed by the server (vllm serve --device / --dtype)")
    return model_options(load, "draft", progress)


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
