"""Random-weight draft/target pairs with real Qwen2 architectures, for `--synthetic` timing.

Every step is exactly `max_step_tokens` long: the step delimiter is a string no token decodes to
(`NEVER_DELIMITER`), and end-of-sequence and the other special tokens are masked out of the logits,
so every run produces the same number of new tokens. No weights, no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

NEVER_DELIMITER = "\u241e\u241e"  # "␞␞": no word of the synthetic vocabulary decodes to it
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Shape:
    """A Qwen2 architecture (the fields of `Qwen2Config` that set cost)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = True

    def config(self, eos_id: int, pad_id: int) -> Qwen2Config:
        return Qwen2Config(
            **asdict(self),
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
            eos_token_id=eos_id,
            bos_token_id=pad_id,
            pad_token_id=pad_id,
        )

    def parameters(self) -> int:
        """Parameter count (embeddings counted once when tied)."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        kv = h // self.num_attention_heads * self.num_key_value_heads
        layer = h * h * 2 + h * kv * 2 + h + 2 * kv + 3 * h * i + 2 * h
        return self.num_hidden_layers * layer + v * h * (1 if self.tie_word_embeddings else 2) + h


@dataclass(frozen=True)
class SizeSpec:
    """A draft/target pair and its default run shape."""

    draft: Shape
    target: Shape
    dtype: str
    step_tokens: int
    steps: int
    prompt_words: int


SIZES: dict[str, SizeSpec] = {
    "tiny": SizeSpec(
        Shape(32, 2, 4, 2, 64, 256), Shape(64, 3, 4, 2, 128, 256), "float32", 4, 3, 12
    ),
    "small": SizeSpec(
        Shape(128, 4, 4, 2, 384, 8192), Shape(512, 8, 8, 2, 1536, 8192), "float32", 16, 8, 64
    ),
    # Qwen2.5-0.5B(-Instruct) and Qwen2.5-7B(-Instruct) shapes
    "real": SizeSpec(
        Shape(896, 24, 14, 2, 4864, 151936, True),
        Shape(3584, 28, 28, 4, 18944, 152064, False),
        "bfloat16",
        32,
        8,
        128,
    ),
}


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer with exactly `vocab_size` tokens: the specials, then `w0 w1 ...`,
    whitespace-separated, with a Qwen-style chat template. No network, no training."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for i in range(vocab_size - len(vocab)):
        vocab[f"w{i}"] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    core.add_special_tokens(list(SPECIAL_TOKENS))
    fast: PreTrainedTokenizerFast = cast(Any, PreTrainedTokenizerFast)(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        chat_template=CHAT_TEMPLATE,
    )
    return fast


def mask_logits(model: Any, token_ids: Sequence[int]) -> None:
    """Make `token_ids` impossible to generate: a forward hook on `lm_head` sets their logits to
    -1e4 (so runs never stop early at end-of-sequence)."""
    ids = torch.tensor(sorted(token_ids), device=model.device)

    def hook(_module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
        output[..., ids] = -1e4
        return output

    model.get_output_embeddings().register_forward_hook(hook)


def random_model(
    shape: Shape, tokenizer: PreTrainedTokenizerFast, dtype: torch.dtype, device: str, seed: int
) -> Any:
    """A randomly initialised Qwen2ForCausalLM of `shape`, built directly on `device` in `dtype`,
    with the tokenizer's special tokens masked out of its logits."""
    eos, pad = int(tokenizer.eos_token_id), int(tokenizer.pad_token_id)
    torch.manual_seed(seed)
    with torch.device(device):
        model = cast(Any, AutoModelForCausalLM).from_config(shape.config(eos, pad), dtype=dtype)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    vocab = tokenizer.get_vocab()
    mask_logits(model, [vocab[t] for t in SPECIAL_TOKENS])
    return model.eval()


def synthetic_prompts(n: int, words: int, vocab_words: int, seed: int) -> list[str]:
    """`n` prompts of `words` random vocabulary words each (same length, so same prefill)."""
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{i}" for i in rng.integers(0, vocab_words, words)) for _ in range(n)]
