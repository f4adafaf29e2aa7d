"""What both adapters share, framework-free: the constructor vocabulary (names and
unknown-argument errors), the per-call `SpecGuardConfig`, and the model facts read from the pair's
config files without loading weights (the engine they run on: `engines`).

One vocabulary for `ChatSpecGuard` and `SpecGuardLLM`:

- the pair: `engine=` (a ready `SpecGuardEngine`), or `draft=` and `target=` (`model=` is the
  target, LangChain's standard name), loaded on first use and shared by every adapter with the
  same loader options (`engines.PAIRS`);
- the configuration: `config=SpecGuardConfig(...)` or `preset="paper" | "balanced" | "fast"` is
  the base of every call (else the engine's own config), then the knob fields below, then
  per-call keywords;
- knobs (LangChain's standard names): `temperature`, `max_tokens`, `top_p`, `top_k`, `min_p`,
  `repetition_penalty`, `stop`, `seed`, `timeout`, and SpecGuard's `k`, `tau`, `beta`,
  `max_steps`;
- loader options (used only when the adapter loads the pair): `load_options=LoadOptions(...)`
  (every option, `specguard_core.models.options`), or the same options as separate fields:
  `device`, `dtype` (both models), `draft_device`, `target_device`, `draft_dtype`,
  `target_dtype` (one model; None: the shared one), `device_map`, `max_memory`, `revision`,
  `trust_remote_code` (False unless you opt in), `quantization_config`; not both ways at once;
  `engine_config` beside either;
- a target on a vLLM server: `target="http://HOST:PORT/v1"` (or `load_options.target_url`) with
  `target_model` (the served name), and optionally `target_tokenizer`, `target_timeout`,
  `target_api_key`.

An unknown constructor argument is an error that names the valid ones (and, for a
`SpecGuardConfig` field, how to pass it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specguard_core.config import PRESETS, SpecGuardConfig, default_config, override_names
from specguard_core.config import preset as make_preset
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import resolve
from specguard_integrations.fields import KNOBS, config_name

# names of remote-API clients that make no sense in-process: what to do instead
REMOTE_ONLY = {name: "the models run in this process; to talk to a `specguard serve` server, use "
               "an OpenAI-compatible client (ChatOpenAI / OpenAILike) with that URL"
               for name in ("base_url", "api_base", "openai_api_base", "organization")}
# SpecGuardConfig fields whose knob field has another name: the name to use instead
KNOB_OF = {config_name(knob): knob for knob in KNOBS if config_name(knob) != knob}


def check_arguments(owner: str, data: Any, valid: Iterable[str],
                    unlisted: Iterable[str] = ()) -> Any:
    """`data` (constructor keywords) as given; a name neither `valid` nor `unlisted` (accepted,
    not offered: a field's own name beside its alias) is a ValueError that lists the valid ones
    and says how to pass a `SpecGuardConfig` field, or what to use instead of a remote client's
    option."""
    if not isinstance(data, dict):
        return data
    unknown = sorted(set(data) - set(valid) - set(unlisted))
    if unknown:
        raise ValueError(f"{owner} got unknown argument(s) {unknown}{_hint(unknown)}; valid "
                         f"arguments: {sorted(n for n in valid if not n.startswith('_'))}")
    return data


def _hint(unknown: list[str]) -> str:
    knobs = [n for n in unknown if n in KNOB_OF]
    in_config = [n for n in unknown if n in override_names() and n not in KNOB_OF]
    remote = [n for n in unknown if n in REMOTE_ONLY]
    if knobs:
        return f" ({knobs[0]}: use {KNOB_OF[knobs[0]]}=)"
    if in_config:
        return f" ({', '.join(in_config)}: pass config=SpecGuardConfig({in_config[0]}=...))"
    return f" ({', '.join(remote)}: {REMOTE_ONLY[remote[0]]})" if remote else ""


def check_config_choice(config: SpecGuardConfig | None, preset: str | None) -> None:
    if config is not None and preset is not None:
        raise ValueError("pass either config= or preset=, not both")
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")


def base_config(config: SpecGuardConfig | None, preset: str | None,
                engine_default: SpecGuardConfig | None) -> SpecGuardConfig:
    """The base of every call: `config`, else the preset, else the engine's own config."""
    if config is not None:
        return config
    if preset is not None:
        return make_preset(preset)
    return engine_default or default_config()


def knob_overrides(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Adapter knob names as SpecGuardConfig fields (`max_tokens` -> `max_new_tokens`, `stop` as a
    tuple); None values are left out."""
    out = {config_name(k): v for k, v in knobs.items() if v is not None}
    if "stop" in out:
        out["stop"] = tuple(out["stop"])
    return out


def request_config(base: SpecGuardConfig, *layers: Mapping[str, Any]) -> SpecGuardConfig:
    """`base` with each layer of overrides applied in order (later wins), validated once."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({k: v for k, v in layer.items() if v is not None})
    return base.merged(**merged)


def is_url(ref: str | None) -> bool:
    """Whether a target reference is a served model's URL (http://HOST:PORT/v1)."""
    return bool(ref) and str(ref).startswith(("http://", "https://"))


def tokenizer_refs(target: str, draft: str, target_tokenizer: str | None = None,
                   target_model: str | None = None) -> list[str]:
    """Where the target's tokenizer is read from, in order: the target itself, or for a served
    target its `target_tokenizer`, its served name, then the draft's (the loader's order)."""
    if not is_url(target):
        return [target]
    return [r for r in (target_tokenizer, target_model, draft) if r]


def local_folder(ref: str) -> Path | None:
    """The local folder `ref` resolves to (a cached name, a path), None when it is not local."""
    path = Path(resolve(ref)).expanduser()
    if path.suffix == ".gguf":
        return None
    return path if path.is_dir() else None


def context_window(ref: str, revision: str | None = None) -> int | None:
    """The model's context window from its local config.json (no weights, no network)."""
    folder = local_folder(ref)
    if folder is None:
        return None
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(folder), local_files_only=True, revision=revision,
                                         trust_remote_code=False)
    except (OSError, ValueError):
        return None
    text_cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    window = getattr(text_cfg, "max_position_embeddings", None)
    return int(window) if isinstance(window, int) else None


def writes_reasoning(ref: str) -> bool:
    """Whether the model's tokenizer declares a `<think>` token or its chat template mentions one
    (read from the head of the local files: added tokens come first in tokenizer.json)."""
    folder = local_folder(ref)
    if folder is None:
        return False
    for name in ("tokenizer_config.json", "chat_template.jinja", "tokenizer.json"):
        file = folder / name
        if file.is_file():
            with file.open("rb") as f:
                if b"<think>" in f.read(1 << 18):
                    return True
    return False


def profile(draft: str, target: str, engine: Any = None) -> dict[str, Any]:
    """What LangChain's `profile` reports, from the loaded engine or the local config files."""
    out: dict[str, Any] = {"tool_calling": True, "tool_choice": True, "structured_output": True,
                           "tool_call_streaming": True, "text_inputs": True, "text_outputs": True,
                           "image_inputs": False, "open_weights": True}
    if engine is not None:
        window: int | None = engine.context_window or None
        vocab = engine.tokenizer.get_vocab()
        out["reasoning_output"] = "<think>" in vocab
    else:
        windows = [w for w in (context_window(draft), context_window(target)) if w]
        window = min(windows) if windows else None
        out["reasoning_output"] = writes_reasoning(target)
    if window:
        out["max_input_tokens"] = window
        out["max_output_tokens"] = window
    return out


def served_target(owner: str, data: Any, key: str) -> Any:
    """Constructor keywords `data` with the target (`data[key]`) set to `load_options.target_url`
    when only the latter names it; both naming different targets is a ValueError."""
    load = data.get("load_options") if isinstance(data, dict) else None
    url = load.target_url if isinstance(load, LoadOptions) else \
        load.get("target_url") if isinstance(load, dict) else None
    if url is None:
        return data
    if data.get(key) not in (None, url):
        raise ValueError(f"{owner} got {key}={data[key]!r} and load_options.target_url={url!r}; "
                         "name the target once")
    return {**data, key: url}
