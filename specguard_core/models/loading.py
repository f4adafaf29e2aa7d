"""Loading a draft/target pair: model ids, local folders, `.gguf` files, or cached names.

Loading happens only here, only when asked (no network in constructors). Progress is shown while the
weights load (transformers' own bar, plus one line per model).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError

from specguard_core.config import EngineConfig, SpecGuardConfig, default_config
from specguard_core.config import preset as make_preset
from specguard_core.models.options import LoadOptions, check_device, check_dtype


class ModelLoadError(OSError):
    """A model that cannot be loaded from where it was named: a folder that is empty, not a model
    or damaged, weights that do not read, a model transformers cannot find. The message says what
    to do. An OSError, so `except OSError` keeps catching it."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """A model path that does not exist (both a `ModelLoadError` and a `FileNotFoundError`)."""


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or ref.endswith(".gguf") or "\\" in ref


def _resolve(ref: str) -> str:
    from specguard_core.models.registry import resolve

    return str(resolve(ref))


def _dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    name = check_dtype(dtype)
    resolved: torch.dtype | str = name if name == "auto" else getattr(torch, name)
    return resolved


def resolve_device(device: str) -> str:
    """`"auto"` as `"cuda"` when a GPU is visible, else `"cpu"`; any other device as given once
    checked: torch must know it, and a GPU device must exist here. Raises ValueError saying what
    to pass instead."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(check_device(device))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} needs a CUDA GPU, but torch {torch.__version__} "
                             "sees none here; use --device cpu (or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} does not exist: {torch.cuda.device_count()} CUDA "
                             "device(s) visible")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} needs Apple's MPS, not available here; use cpu")
    return device


def model_folder_problem(folder: Path) -> str | None:
    """Why a local folder cannot be a model (empty, no config.json, damaged weights), or None."""
    if not folder.is_dir():
        return None
    if not any(folder.iterdir()):
        return f"model folder {folder} is empty"
    if not (folder / "config.json").is_file():
        return (f"{folder} is not a transformers model folder (no config.json); pass a folder "
                "that save_pretrained wrote, a .gguf file or a model id")
    from specguard_core.models.integrity import weights_problem

    if problem := weights_problem(folder):
        return (f"model folder {folder} is damaged: {problem}. If it is in SpecGuard's cache, "
                "`specguard models fetch NAME` repairs it; otherwise copy or convert it again")
    return None


def local_source(ref: str, revision: str | None = None) -> tuple[str, str | None] | None:
    """(folder, `.gguf` file name or None) where `ref`'s files are on this machine, found on disk
    only (no network, not even the hub's request headers): an existing folder or `.gguf` file, a
    model in SpecGuard's cache, or a hub id's snapshot in Hugging Face's cache. None otherwise."""
    path = Path(_resolve(ref)).expanduser()
    if path.is_dir():
        return str(path), None
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), path.name
    if path.exists() or _looks_local(ref):
        return None
    from huggingface_hub import try_to_load_from_cache

    try:
        hit = try_to_load_from_cache(ref, "tokenizer_config.json", revision=revision)
    except ValueError:  # not a hub id either
        return None
    return (str(Path(hit).parent), None) if isinstance(hit, str) else None


def local_tokenizer(ref: str, *, revision: str | None = None,
                    trust_remote_code: bool = False) -> Any:
    """`ref`'s tokenizer from the files on this machine (see `local_source`), never the network.
    Raises `ModelLoadError` when they are not here, transformers' OSError or ValueError when
    they do not load."""
    from transformers import AutoTokenizer

    source = local_source(ref, revision)
    if source is None:
        raise ModelLoadError(f"{ref!r} is not on this machine (not a folder, nor in a model "
                             "cache)")
    folder, gguf = source
    extra = {"gguf_file": gguf} if gguf else {}
    return AutoTokenizer.from_pretrained(folder, local_files_only=True,
                                         trust_remote_code=bool(trust_remote_code), **extra)


def check_vocab(model: Any, tokenizer: Any, role: str) -> None:
    """Raise ValueError if `model`'s input embedding has fewer rows than `tokenizer` has tokens:
    an id past the embedding (a token the other model wrote, or in the prompt) would crash the
    model mid-generation."""
    try:
        embed = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers model (a scripted stand-in)
        embed = None
    rows = getattr(embed, "num_embeddings", None) or getattr(model.config, "vocab_size", None)
    if rows is not None and rows < len(tokenizer):
        raise ValueError(f"the {role} model's embedding has {rows} rows but its tokenizer has "
                         f"{len(tokenizer)} tokens; pass the tokenizer that belongs to the model, "
                         "or resize it with model.resize_token_embeddings(len(tokenizer))")


def check_pair(draft_model: Any, draft_tokenizer: Any, target_model: Any,
               target_tokenizer: Any) -> None:
    """Checks an engine runs on a pair before any generation (see `check_vocab`)."""
    check_vocab(draft_model, draft_tokenizer, "draft")
    check_vocab(target_model, target_tokenizer, "target")


def load_model(ref: str, *, device: str = "auto", dtype: str | torch.dtype = "auto",
               device_map: Any = None, max_memory: dict[Any, Any] | None = None,
               revision: str | None = None, trust_remote_code: bool = False,
               quantization_config: Any = None, progress: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, folder, `.gguf` file or cached model name.

    `max_memory`, `revision` and `quantization_config` go to transformers' `from_pretrained` as
    given (None: not passed). No code from the model folder runs unless `trust_remote_code=True`
    (always passed to transformers explicitly, so it never asks on stdin). Every model that does
    not load is a `ModelLoadError` saying why: a missing path (`ModelNotFoundError`, also a
    FileNotFoundError), an empty, non-model or damaged folder (before transformers reads it), or
    what transformers could not read or find."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _resolve(ref)
    local = Path(path).expanduser()
    if _looks_local(path) and not local.exists():
        raise ModelNotFoundError(f"model path {path} does not exist; pass a model folder, a .gguf "
                                 "file or a model id (see `specguard models list`)")
    if problem := model_folder_problem(local):
        raise ModelLoadError(problem)
    if not local.exists() and local_source(ref, revision) is None:
        _check_on_hub(ref, revision)  # a download: a mistyped id fails now, not after retries
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
    except ValueError as err:
        if trust_remote_code or "trust_remote_code" not in str(err):
            raise
        raise ValueError(f"model {ref!r} needs Python code shipped in its folder, which SpecGuard "
                         "does not run unless asked: pass trust_remote_code=True (CLI: "
                         "--trust-remote-code) only if you trust that code") from None
    except SafetensorError as err:
        raise ModelLoadError(f"could not load model {ref!r}: its weights are damaged ({err}); "
                             "fetch or convert it again (`specguard models fetch` for cached "
                             "models)") from None
    except OSError as err:
        from specguard_core.models.registry import fetch_hint

        hint = fetch_hint(ref) or ("Offline? Fetch the default pair with `specguard models fetch` "
                                   "or pass a local folder.")
        raise ModelLoadError(f"could not load model {ref!r}: {err}\n{hint}") from err
    if device_map is None and quantization_config is None:  # quantized weights are placed by it
        model = model.to(device)
    return model, tokenizer


def _check_on_hub(ref: str, revision: str | None) -> None:
    """One quick request for a model that must be downloaded: a hub id that does not exist (or
    is private or gated) or a Hub that cannot be reached is a `ModelLoadError` within seconds,
    where transformers' download would retry for about a minute first."""
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    from specguard_core.models.registry import fetch_hint

    try:
        model_info(ref, revision=revision, timeout=10)
    except GatedRepoError:
        raise ModelLoadError(f"model {ref!r} is gated on the Hugging Face Hub: accept its terms "
                             "there and log in (`hf auth login`), or pass a local folder") from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"no model {ref!r} on the Hugging Face Hub (or it is private); "
                                 "check the id, or pass a local folder (cached models: "
                                 "`specguard models list`)") from None
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"model {ref!r} has no revision {revision!r} on the Hugging "
                                 "Face Hub") from None
    except Exception as err:  # noqa: BLE001 - offline mode, DNS, timeouts: the Hub is not reachable
        hint = fetch_hint(ref) or ("Fetch the default pair with `specguard models fetch` or pass "
                                   "a local folder.")
        raise ModelLoadError(f"could not load model {ref!r}: it is not on this machine and the "
                             f"Hugging Face Hub cannot be reached ({type(err).__name__}: "
                             f"{err!s:.200})\n{hint}") from None


def load_engine(cls: Any, draft: str, target: str, *, load: LoadOptions | None = None,
                config: SpecGuardConfig | None = None, engine_config: EngineConfig | None = None,
                preset: str | None = None, progress: bool = True, **options: Any) -> Any:
    """Both models with the same loader options (`load`, with `options`: `LoadOptions` fields
    given as keywords, over it), except that `draft_device` / `target_device` and `draft_dtype` /
    `target_dtype` override `device` / `dtype` for one model (e.g. a float32 draft on the CPU
    beside a bfloat16 target on the GPU). Every option is checked before either model loads; a
    bad one is a ValueError naming it."""
    opts = (load or LoadOptions()).merged(**options)
    cfg = config or (make_preset(preset) if preset else default_config())
    if served := sorted(set(opts.served()) - {"target_url"}):
        raise ValueError(f"{', '.join(served)} applies to a target served over HTTP; pass "
                         f"target='http://HOST:PORT/v1' (got target={target!r})")
    kwargs = {role: model_options(opts, role, progress) for role in ("draft", "target")}
    d_model, d_tok = load_model(draft, **kwargs["draft"])
    t_model, t_tok = load_model(target, **kwargs["target"])
    return cls(d_model, d_tok, t_model, t_tok, config=cfg, engine_config=engine_config,
               name=f"specguard:{Path(draft).name}+{Path(target).name}")


def model_options(load: LoadOptions, role: Literal["draft", "target"], progress: bool = True
                  ) -> dict[str, Any]:
    """`load_model`'s keywords for the `role` model, its device checked on this machine now
    (ValueError naming `<role>_device` when the model's own option is the bad one)."""
    placement = load.placement(role)
    try:
        resolve_device(placement["device"])
    except ValueError as err:
        own = getattr(load, f"{role}_device")
        if own is None:
            raise
        raise ValueError(f"{role}_device={own!r}: {err}") from None
    return {**placement, "device_map": load.device_map, "max_memory": load.max_memory,
            "revision": load.revision, "trust_remote_code": load.trust_remote_code,
            "quantization_config": load.quantization(), "progress": progress}
