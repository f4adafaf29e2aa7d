"""Tiny random models over a locally built tokenizer (no hub, no network), shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

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


def make_pair_dirs(root: Path) -> tuple[Path, Path]:
    """Two model folders (draft: 3 layers, target: 4 layers) sharing one tokenizer."""
    tok = build_tokenizer(root / "tok")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    draft = build_model(root / "draft", len(tok), seed=1, layers=3, hidden=32, eos=eos)
    target = build_model(root / "target", len(tok), seed=2, layers=4, hidden=48, eos=eos)
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
