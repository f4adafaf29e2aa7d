"""A tiny random draft/target pair saved to folders, with a locally trained tokenizer (no hub)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning.",
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "First, 16 - 3 - 4 = 9.\n\nThen 9 * 2 = 18.\n\nThe answer is \\boxed{18}.",
    "user assistant system 0123456789 + - * / = $ , . ? ( )",
]


def build_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(CORPUS * 4, trainer)
    tok: PreTrainedTokenizerFast = cast(Any, PreTrainedTokenizerFast)(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=TEMPLATE,
    )
    tok.save_pretrained(out)
    return tok


def build_model(
    out: Path, tok: PreTrainedTokenizerFast, hidden: int, layers: int, seed: int
) -> Path:
    torch.manual_seed(seed)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def bench_pair_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(draft_dir, target_dir): float32 random Qwen2 models sharing one tokenizer."""
    root = tmp_path_factory.mktemp("bench_pair")
    tok = build_tokenizer(root / "tok")
    draft = build_model(root / "draft", tok, hidden=32, layers=2, seed=1)
    target = build_model(root / "target", tok, hidden=48, layers=3, seed=2)
    return draft, target


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    """Tiny models run fastest on one intra-op thread (on a loaded 2-core box, OpenMP spinning
    made these tests ~20x slower); the previous setting is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
