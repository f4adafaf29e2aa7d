"""Tiny random models and locally built tokenizers (no hub, no network), shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
            "<think>", "</think>"]

# A Qwen2.5-style template (Hermes tool calls) written for the tests.
QWEN_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{%- else %}You are helpful."
    "{%- endif %}\n\n# Tools\n\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\n"
    "For each function call, return a json object within <tool_call></tool_call> XML tags."
    "<|im_end|>\n"
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}"
    "<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{%- for tc in message.tool_calls or [] %}\n<tool_call>\n"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}'
    "\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}"
    "\n</tool_response><|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

# A Llama-3-style template: tools as JSON in the user turn, calls as bare JSON.
LLAMA_TEMPLATE = (
    "<|im_start|>"
    "{%- for message in messages %}{{ message.role }}: "
    "{%- if tools and loop.last and message.role == 'user' %}Functions: "
    "{%- for t in tools %}{{ t | tojson }} {% endfor %}{%- endif %}"
    "{{ message.content or '' }}\n{%- endfor %}"
    "{%- if add_generation_prompt %}assistant: {%- endif %}"
)

CORPUS = [
    "The answer is 42.\n\nFirst, add 3 and 4 to get 7.\n\nThen multiply by 6.",
    'Let me call a tool.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "Please reason step by step, and put your final answer within \\boxed{}. 0123456789 +-*/=",
    "user assistant system tool functions json name arguments city weather get_weather",
]


def build_tokenizer(out: Path, template: str = QWEN_TEMPLATE, vocab_size: int = 400) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=template)
    fast.save_pretrained(out)
    return out


def build_model(out: Path, vocab_size: int, seed: int, layers: int = 4, hidden: int = 32,
                eos: int = 2, dtype: torch.dtype = torch.float32) -> Path:
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, eos_token_id=eos, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to(dtype)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(out)
    return out


def load_pair(root: Path) -> tuple[Any, Any, Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok_dir = build_tokenizer(root / "tok")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    draft_dir = build_model(root / "draft", len(tok), seed=1, layers=3, eos=eos)
    target_dir = build_model(root / "target", len(tok), seed=2, layers=4, hidden=48, eos=eos)
    for d in (draft_dir, target_dir):
        tok.save_pretrained(d)
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    return draft, tok, target, AutoTokenizer.from_pretrained(tok_dir)
