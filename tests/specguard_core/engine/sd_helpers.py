"""A tiny float32 pair whose draft agrees with its target only in part (a noisy copy), so the
speculative fallback both keeps and rejects draft tokens. Random weights; no hub."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from specguard_core.testing import build_tokenizer


def noisy_copy_pair(root: Path, noise: float = 0.03, seed: int = 2) -> tuple[Any, Any, Any, Any]:
    """(draft, tokenizer, target, tokenizer): the target has a wide init (varied greedy output, not
    one repeated token); the draft is the target plus Gaussian weight noise of std `noise`."""
    tok = build_tokenizer(root / "tok")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=48, intermediate_size=96,
                      num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, eos_token_id=eos, tie_word_embeddings=True,
                      initializer_range=0.3)
    target = Qwen2ForCausalLM(cfg).eval()
    target.generation_config.eos_token_id = eos
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * noise)
    return draft, tok, target, tok
