"""Loading a pair whose target is served by vLLM: `SpecGuardEngine.from_pretrained(draft,
"http://HOST:PORT/v1", target_model=NAME)` comes here (see `remote.py` for the target itself).

The draft loads as any model does (`models.loading.load_model`); the target's tokenizer is read
from local files only, and the server is asked what it serves and checked against it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specguard_core.config import EngineConfig, SpecGuardConfig
from specguard_core.engine.remote import RemoteTarget

REMOTE_OPTIONS = ("target_model", "target_tokenizer", "target_timeout", "target_api_key",
                  "target_top_logprobs")


def is_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


def load_remote_engine(cls: Any, draft: str, target_url: str, *, target_model: str | None = None,
                       target_tokenizer: str | None = None, target_timeout: float = 120.0,
                       target_api_key: str | None = None, target_top_logprobs: int = 20,
                       config: SpecGuardConfig | None = None,
                       engine_config: EngineConfig | None = None, preset: str | None = None,
                       **options: Any) -> Any:
    """The draft loaded here (`options`: `load_model`'s) and the target served at `target_url`.

    The target's tokenizer is read locally, never from the hub: `target_tokenizer` (a folder or
    cached name), else the served model's name when it names a local model, else the draft's
    own; `RemoteTarget.connect` then checks that the server tokenizes as it does."""
    from transformers import AutoTokenizer, GenerationConfig

    from specguard_core.config import preset as make_preset
    from specguard_core.models.loading import load_model
    from specguard_core.models.registry import resolve

    cfg = config or (make_preset(preset) if preset else SpecGuardConfig())
    d_model, d_tok = load_model(draft, **options)
    tokenizer, folder = d_tok, None
    for ref in (target_tokenizer, target_model):
        if ref is None:
            continue
        try:
            folder = resolve(ref)
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True,
                                                      trust_remote_code=False)
            break
        except (OSError, ValueError) as err:
            if ref == target_tokenizer:
                raise OSError(f"target_tokenizer {ref!r} is not available locally ({err}); pass "
                              "the served model's folder (or `specguard models fetch` it)") from None
            folder = None
    try:
        gen = GenerationConfig.from_pretrained(folder, local_files_only=True) if folder else \
            d_model.generation_config
        eos = getattr(gen, "eos_token_id", None)
    except OSError:
        eos = None
    eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) + [tokenizer.eos_token_id]
               if e is not None]
    same = tokenizer is d_tok or tokenizer.get_vocab() == d_tok.get_vocab()
    vocab = getattr(d_model.config.get_text_config(), "vocab_size", None) if same else None
    remote = RemoteTarget.connect(target_url, target_model, tokenizer, eos_ids=eos_ids,
                                  vocab_size=vocab, timeout_s=target_timeout,
                                  top_logprobs=target_top_logprobs, api_key=target_api_key)
    return cls(d_model, d_tok, remote, config=cfg, engine_config=engine_config,
               name=f"specguard:{Path(draft).name}+{remote.model_name}")
