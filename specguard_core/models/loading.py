"""Loading a draft/target pair: model ids, local folders, `.gguf` files, or cached names.

Loading happens only here, only when asked (no network in constructors). Progress is shown while the
weights load (transformers' own bar, plus one line per model).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from specguard_core.config import EngineConfig, SpecGuardConfig
from specguard_core.config import preset as make_preset


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or ref.endswith(".gguf") or "\\" in ref


def _resolve(ref: str) -> str:
    from specguard_core.models.registry import resolve

    return str(resolve(ref))


def _dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    resolved: torch.dtype = getattr(torch, str(dtype))
    return resolved


def resolve_device(device: str) -> str:
    """`"auto"` as `"cuda"` when a GPU is visible, else `"cpu"`; any other device as given."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_model(ref: str, *, device: str = "auto", dtype: str | torch.dtype = "auto",
               device_map: Any = None, max_memory: dict[Any, Any] | None = None,
               revision: str | None = None, trust_remote_code: bool = False,
               quantization_config: Any = None, progress: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, folder, `.gguf` file or cached model name.

    `max_memory`, `revision` and `quantization_config` go to transformers' `from_pretrained` as
    given (None: not passed); `trust_remote_code` is always passed, False unless the caller opts in,
    so a model folder's custom code never runs implicitly."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _resolve(ref)
    local = Path(path).expanduser()
    if _looks_local(path) and not local.exists():
        raise FileNotFoundError(f"model path {path} does not exist; pass a model folder, a .gguf "
                                "file or a model id (see `specguard models list`)")
    kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if revision is not None:
        kwargs["revision"] = revision
    model_kwargs = {k: v for k, v in (("max_memory", max_memory),
                                      ("quantization_config", quantization_config)) if v is not None}
    folder = str(local) if local.exists() else path
    if local.suffix == ".gguf":
        folder, kwargs["gguf_file"] = str(local.parent), local.name
    device = resolve_device(device)
    if progress:
        print(f"loading {ref} ...", file=sys.stderr, flush=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        model: Any = AutoModelForCausalLM.from_pretrained(
            folder, dtype=_dtype(dtype), device_map=device_map, **kwargs, **model_kwargs)
    except OSError as err:
        from specguard_core.models.registry import fetch_hint

        hint = fetch_hint(ref) or ("Offline? Fetch the default pair with `specguard models fetch` "
                                   "or pass a local folder.")
        raise OSError(f"could not load model {ref!r}: {err}\n{hint}") from err
    if device_map is None and quantization_config is None:  # quantized weights are placed by it
        model = model.to(device)
    return model, tokenizer


def load_engine(cls: Any, draft: str, target: str, *, device: str = "auto",
                dtype: str | torch.dtype = "auto", device_map: Any = None,
                max_memory: dict[Any, Any] | None = None, revision: str | None = None,
                trust_remote_code: bool = False, quantization_config: Any = None,
                config: SpecGuardConfig | None = None, engine_config: EngineConfig | None = None,
                preset: str | None = None, progress: bool = True) -> Any:
    """Both models with the same loader options (see `load_model`)."""
    cfg = config or (make_preset(preset) if preset else SpecGuardConfig())
    options: dict[str, Any] = dict(
        device=device, dtype=dtype, device_map=device_map, max_memory=max_memory,
        revision=revision, trust_remote_code=trust_remote_code,
        quantization_config=quantization_config, progress=progress)
    d_model, d_tok = load_model(draft, **options)
    t_model, t_tok = load_model(target, **options)
    return cls(d_model, d_tok, t_model, t_tok, config=cfg, engine_config=engine_config,
               name=f"specguard:{Path(draft).name}+{Path(target).name}")
