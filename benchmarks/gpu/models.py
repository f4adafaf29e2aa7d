"""Random-weight models built from the real configs under `configs/` (no hub, no weights).

A model's speed depends on its shapes, not its weights: a random-weight Qwen2 with the published
config runs each forward exactly as long as the trained one. `--tiny` shrinks every config to two
small layers so the whole measurement runs on a CPU in seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CONFIGS = Path(__file__).resolve().parent / "configs"

# model name -> config file; the first three are the models of the default pair and Qwen2.5-7B
MODELS: dict[str, str] = {
    "coder-0.5b": "qwen2.5-coder-0.5b-instruct.json",
    "coder-1.5b": "qwen2.5-coder-1.5b-instruct.json",
    "qwen-7b": "qwen2.5-7b-instruct.json",
    "math-1.5b": "qwen2.5-math-1.5b.json",
    "math-7b": "qwen2.5-math-7b.json",
}
# pair name -> (draft, target), in the order they are measured (the default pair first)
PAIRS: dict[str, tuple[str, str]] = {
    "coder-0.5b/1.5b": ("coder-0.5b", "coder-1.5b"),
    "coder-0.5b/qwen-7b": ("coder-0.5b", "qwen-7b"),
    "math-1.5b/7b": ("math-1.5b", "math-7b"),
}
DEFAULT_PAIR = "coder-0.5b/1.5b"
# what `--tiny` keeps of every config (the vocabulary stays large enough for random prompts)
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_window_layers=2)


@dataclass
class ModelSpec:
    """One model to measure: its name, config file and the (possibly shrunk) config values."""

    name: str
    config_file: str
    values: dict[str, Any]

    @property
    def max_positions(self) -> int:
        return int(self.values.get("max_position_embeddings") or 0)


def load_spec(name: str, tiny: bool = False) -> ModelSpec:
    """The config of model `name` (a key of MODELS); `tiny` shrinks it (see TINY)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    values = json.loads((CONFIGS / MODELS[name]).read_text())
    values = {k: v for k, v in values.items() if not k.startswith("_") and k != "layer_types"}
    if tiny:
        values.update(TINY)
    return ModelSpec(name, MODELS[name], values)


def pair_models(pairs: list[str]) -> list[str]:
    """The distinct models of `pairs`, in measuring order."""
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown:
        raise ValueError(f"unknown pair(s) {unknown}; choose from {', '.join(PAIRS)}")
    return list(dict.fromkeys(m for p in pairs for m in PAIRS[p]))


def build(spec: ModelSpec, device: str, dtype: torch.dtype) -> Any:
    """A random-weight causal LM of `spec` built directly on `device` in `dtype` (a 7B model is
    initialised on the GPU in seconds; nothing is built on the CPU first)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(spec.values)
    # random weights: no special id (no end of turn cuts a measured proposal short)
    values.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    return model.eval()


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


class StubTokenizer:
    """The little of a tokenizer the engine's proposal loop needs: every id decodes to one "a", so
    no step boundary or end of turn cuts a measured proposal short."""

    eos_token_id = None
    pad_token_id = None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "a" * len(ids)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [1] * len(text)}
