"""Loading a draft/target pair on llama.cpp: GGUF files, named by path or by the cached names of
`specguard models fetch` (which keeps each bundle's GGUF beside its converted folder).

Each model gets its own llama.cpp context (`context.py`) and the Hugging Face tokenizer of the same
vocabulary (the cached converted folder's, else transformers reads it from the GGUF), which renders
chat templates and turns ids into text; the ids are llama.cpp's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from specguard_core.config import SpecGuardConfig, default_config
from specguard_core.config import preset as make_preset
from specguard_core.llamacpp.context import LlamaContext, binding
from specguard_core.llamacpp.handle import LlamaCppHandle
from specguard_core.models.loading import ModelLoadError, ModelNotFoundError, local_tokenizer
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import cached_folder, gguf_path, lookup


def gguf_file(ref: str) -> Path:
    """The GGUF file `ref` names: a `.gguf` path, or a cached model name (`qwen1.5b`)."""
    path = Path(ref).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelNotFoundError(f"GGUF file {path} does not exist")
        return path
    bundle = lookup(ref)
    if bundle is not None:
        cached = gguf_path(bundle)
        if cached.is_file():
            return cached
        raise ModelLoadError(f"{ref} is not cached: run `specguard models fetch {bundle.name}` "
                             "(the llama.cpp backend runs its GGUF file)")
    raise ModelLoadError(f"the llama.cpp backend loads GGUF files: pass a .gguf path or a cached "
                         f"model name (`specguard models list`), not {ref!r}; or use --backend "
                         "transformers")


def tokenizer_for(ref: str, gguf: Path) -> Any:
    """The Hugging Face tokenizer of `ref`'s vocabulary, from this machine only."""
    bundle = lookup(ref)
    folder = cached_folder(bundle) if bundle is not None else None
    return local_tokenizer(str(folder) if folder is not None else str(gguf))


def load_handle(ref: str, opts: LoadOptions, progress: bool = True) -> LlamaCppHandle:
    """One model of the pair on llama.cpp, with torch's thread count (`torch.set_num_threads`;
    the bench's `--threads`) and `opts.context_size` KV cells."""
    binding()  # the install line first, before any file is read
    path = gguf_file(ref)
    bundle = lookup(ref)
    name = bundle.name if bundle is not None else path.stem  # a cached file is "model.gguf"
    if progress:
        print(f"loading {name} on llama.cpp ...", file=sys.stderr, flush=True)
    tokenizer = tokenizer_for(ref, path)
    ctx = LlamaContext(path, n_ctx=opts.context_size, threads=_threads())
    if ctx.n_vocab < len(tokenizer):
        raise ModelLoadError(f"{path.name}: llama.cpp reads {ctx.n_vocab} tokens but its "
                             f"tokenizer has {len(tokenizer)}; the files do not belong together")
    return LlamaCppHandle(ctx, tokenizer, name=name)


def load_llamacpp_engine(cls: Any, draft: str, target: str, *, load: LoadOptions,
                         config: SpecGuardConfig | None = None, preset: str | None = None,
                         progress: bool = True, **engine: Any) -> Any:
    """The engine over `draft` and `target` run by llama.cpp, with `config` (or `preset`) as its
    default request config (`engine`: its other keywords, engine_config)."""
    cfg = config or (make_preset(preset) if preset else default_config())
    handles = [load_handle(ref, load, progress) for ref in (draft, target)]
    return cls(handles[0], handles[0].tokenizer, handles[1], handles[1].tokenizer, config=cfg,
               name=f"specguard:{handles[0].name}+{handles[1].name}", **engine)


def _threads() -> int:
    """The CPU cores torch would use (its thread count), as llama.cpp's default."""
    import torch

    return max(1, min(torch.get_num_threads(), os.cpu_count() or 1))
