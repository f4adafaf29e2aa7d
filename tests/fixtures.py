"""Model pairs for the tests, in one place.

- The tiny pair (`make_pair_dirs`, `load_pair`, `build_model`): random Qwen2 models over a locally
  built tokenizer (no hub, no network); every suite that needs real weights-shaped models uses it.
- The real pair (`real_pair_dirs`, `real_engine`, `needs_real`): the default Qwen2.5-Coder pair as
  `specguard models fetch` caches it, found through the library (`registry.lookup` +
  `cached_folder`, so `$SPECGUARD_CACHE` is honoured). Real tests are opt-in: marker `real` and
  `SPECGUARD_REAL_MODELS=1`; they skip with a clear reason when the pair is absent.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from specguard_core.models.registry import (
    CACHE_ENV,
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    cache_dir,
    cached_folder,
    lookup,
)
from specguard_core.testing import build_tokenizer

# An OpenAI-style tool used across the chat and agent-step tests.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}

# A Llama-3-flavoured template: tools as JSON in the last user turn, no <tool_call> markers.
LLAMA_STYLE_TEMPLATE = (
    "{{ bos_token or '' }}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if tools and loop.last and message.role == 'user' %}Given the following functions, "
    "respond with a JSON function call.\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "{% endif %}{{ message.content or '' }}"
    "{% for tc in message.tool_calls or [] %}{\"name\": \"{{ tc.function.name }}\", "
    "\"parameters\": {{ tc.function.arguments | tojson }}}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_model(out: Path, vocab_size: int, seed: int, layers: int, hidden: int, eos: int,
                max_positions: int = 512) -> Path:
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=max_positions, eos_token_id=eos,
                      tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(out)
    return out


def make_pair_dirs(root: Path, max_positions: int = 512) -> tuple[Path, Path]:
    """Two model folders (draft: 3 layers, target: 4 layers) sharing one tokenizer."""
    tok = build_tokenizer(root / "tok")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    draft = build_model(root / "draft", len(tok), seed=1, layers=3, hidden=32, eos=eos,
                        max_positions=max_positions)
    target = build_model(root / "target", len(tok), seed=2, layers=4, hidden=48, eos=eos,
                         max_positions=max_positions)
    for d in (draft, target):
        tok.save_pretrained(d)
    return draft, target


def load_pair(root: Path) -> tuple[Any, Any, Any, Any]:
    draft_dir, target_dir = make_pair_dirs(root)
    return (AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32),
            AutoTokenizer.from_pretrained(draft_dir),
            AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32),
            AutoTokenizer.from_pretrained(target_dir))


def fake_converter(gguf: Path, dst: Path, dtype: str) -> None:
    """A stand-in for the GGUF conversion: writes a folder that looks converted (its weights a
    valid safetensors file holding the GGUF's bytes)."""
    from safetensors.torch import save_file

    dst.mkdir(parents=True)
    (dst / "config.json").write_text(f'{{"dtype": "{dtype}", "src": "{gguf.name}"}}')
    payload = torch.frombuffer(bytearray(gguf.read_bytes()), dtype=torch.uint8)
    save_file({"payload": payload}, str(dst / "model.safetensors"))
    (dst / "tokenizer.json").write_text("{}")


# ---- the real default pair (opt-in) ---------------------------------------------------------
REAL_REASON = ("opt-in real-model test: set SPECGUARD_REAL_MODELS=1 with the default pair cached "
               f"(`specguard models fetch`; cache: ${CACHE_ENV} or ~/.cache/specguard/models)")


def real_pair_dirs() -> tuple[Path, Path] | None:
    """(draft, target) folders of the default pair in the model cache, None when not cached."""
    folders = []
    for name in (DEFAULT_DRAFT, DEFAULT_TARGET):
        bundle = lookup(name)
        folder = cached_folder(bundle) if bundle is not None else None
        if folder is None:
            return None
        folders.append(folder)
    return folders[0], folders[1]


HAVE_REAL = os.environ.get("SPECGUARD_REAL_MODELS") == "1" and real_pair_dirs() is not None
needs_real = [pytest.mark.real, pytest.mark.skipif(not HAVE_REAL, reason=REAL_REASON)]


@functools.cache
def real_engine(dtype: str = "bfloat16", preset: str | None = None) -> Any:
    """The default pair on CPU in `dtype` (under `preset`, else the default config), loaded once
    per session and arguments; skips when not opted in."""
    from specguard_core import SpecGuardEngine

    dirs = real_pair_dirs() if HAVE_REAL else None
    if dirs is None:
        pytest.skip(f"{REAL_REASON} (looked in {cache_dir()})")
    return SpecGuardEngine.from_pretrained(str(dirs[0]), str(dirs[1]), dtype=dtype,
                                           device="cpu", progress=False, preset=preset)


def record_stream_configs(engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The `SpecGuardConfig` of every `engine.stream` call from now on (the call still runs): what
    an adapter or the server actually asked the engine for."""
    seen: list[Any] = []
    real_stream = engine.stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["config"])
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(engine, "stream", spy)
    return seen


# ---- devices ---------------------------------------------------------------------------------
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def on_device(pair: tuple[Any, Any, Any, Any], device: str) -> tuple[Any, Any, Any, Any]:
    """(draft, tokenizer, target, tokenizer) with both models moved to `device` (in place)."""
    draft, draft_tok, target, target_tok = pair
    return draft.to(device), draft_tok, target.to(device), target_tok
