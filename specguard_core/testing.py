"""Deterministic stand-ins for tests of code built on SpecGuard (adapters, agents, apps).

`ScriptedLM` is a causal LM whose next token follows a script: `responder(prompt_text)` returns the
assistant's whole reply, and the model emits it token by token through the real engine (KV cache,
forks, rollbacks, attention capture and all). `sharpness` sets how peaked its distribution is, i.e.
its confidence, so a test can make the draft's steps pass or fail verification.
`scripted_engine(...)` builds a `SpecGuardEngine` from two of them and a locally built tokenizer.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig, Qwen2Config
from transformers.modeling_outputs import CausalLMOutputWithPast

from specguard_core.config import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine

Responder = Callable[[str], str]
ASSISTANT = "<|im_start|>assistant\n"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
            "<think>", "</think>"]

# A Qwen2.5-style chat template with Hermes tool calls (a faithful subset of Qwen's own).
QWEN_STYLE_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}You are helpful."
    "{% endif %}\n\n# Tools\n\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object within <tool_call></tool_call> XML tags."
    "<|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for tc in message.tool_calls or [] %}\n<tool_call>\n"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}"
    "\n</tool_response><|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "The answer is 42.\n\nFirst, add 3 and 4 to get 7.\n\nThen multiply by 6.",
    'Let me call a tool.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "Please reason step by step, and put your final answer within \\boxed{}. 0123456789 +-*/=",
    "user assistant system tool functions json name arguments city weather get_weather",
]


def build_tokenizer(out: str | Path, template: str = QWEN_STYLE_TEMPLATE,
                    vocab_size: int = 400) -> Any:
    """A small byte-level BPE tokenizer with Qwen's special tokens, trained locally (no hub);
    saved to `out` and returned as a `PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=template)
    fast.save_pretrained(str(out))
    return fast


class ScriptedLM(torch.nn.Module):
    """A stand-in causal LM that writes `responder(prompt)` after the last assistant header.

    The KV cache stores token ids (as keys), so cache forks, crops and catch-ups behave as with a real
    model; logits give the scripted next token a margin of `sharpness` over every other token; an
    off-script prefix (a sampled detour) gets EOS. Attention goes to the first prompt token, so
    scripted steps are fully grounded and `sharpness` alone moves the score.
    """

    def __init__(self, tokenizer: Any, responder: Responder, sharpness: float = 12.0,
                 layers: int = 3, name: str = "scripted") -> None:
        super().__init__()
        self.tokenizer, self.responder, self.sharpness = tokenizer, responder, sharpness
        self.eos = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self._header: list[int] = tokenizer(ASSISTANT, add_special_tokens=False)["input_ids"]
        self.config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16,
                                  num_hidden_layers=layers, num_attention_heads=1,
                                  num_key_value_heads=1, max_position_embeddings=32768)
        self.config._name_or_path = name
        self.generation_config = GenerationConfig(eos_token_id=self.eos)
        self._device_anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.calls: list[str] = []  # prompts the responder was asked about (for tests)

    def set_attn_implementation(self, name: str) -> None:  # attention is scripted, nothing to set
        return None

    def _next_token(self, ids: list[int]) -> int:
        start = self._reply_start(ids)
        prompt = self.tokenizer.decode(ids[:start], skip_special_tokens=False)
        reply = self.responder(prompt)
        if prompt not in self.calls:
            self.calls.append(prompt)
        done_ids = ids[start:]
        reply_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
        if reply_ids[: len(done_ids)] == done_ids:  # on script, compared as token ids, so a
            # character that spans several byte-level tokens is emitted whole
            return int(reply_ids[len(done_ids)]) if len(reply_ids) > len(done_ids) else self.eos
        done = self.tokenizer.decode(done_ids, skip_special_tokens=False)
        if done and done in reply:  # a forced prefix (e.g. a tool-call opener) joins the script
            rest = self.tokenizer(reply[reply.index(done) + len(done):],
                                  add_special_tokens=False)["input_ids"]
            return int(rest[0]) if rest else self.eos
        return self.eos

    def _reply_start(self, ids: list[int]) -> int:
        """Index just after the last `<|im_start|>assistant\n` header (the whole prompt if none)."""
        header = self._header
        for i in range(len(ids) - len(header), -1, -1):
            if ids[i: i + len(header)] == header:
                return i + len(header)
        return len(ids)

    def forward(self, input_ids: torch.Tensor, cache: DynamicCache | None = None,
                logits_to_keep: int = 1, output_hidden_states: bool = False,
                **kwargs: Any) -> CausalLMOutputWithPast:
        b, q = input_ids.shape
        cache = cache if cache is not None else DynamicCache()
        as_kv = input_ids.float()[:, None, :, None]  # [b, 1, q, 1]
        for layer in range(self.config.num_hidden_layers):
            keys, _ = cache.update(as_kv, as_kv, layer)
        all_ids = keys[:, 0, :, 0].long()  # [b, n]
        n = all_ids.shape[1]
        keep = q if logits_to_keep == 0 else min(q, logits_to_keep)
        logits = torch.zeros(b, keep, self.config.vocab_size)
        for row in range(b):
            for j in range(keep):
                end = n - keep + j + 1
                logits[row, j, self._next_token(all_ids[row, :end].tolist())] = self.sharpness
        recorder = kwargs.get("specguard_recorder")
        if recorder is not None:
            rows = torch.zeros(b, q, n)
            rows[:, :, 0] = 1.0  # all attention on the first prompt token: fully grounded
            for layer in recorder.layers:
                recorder.rows[layer] = rows
        hidden = torch.nn.functional.one_hot(input_ids % 16, 16).float() if output_hidden_states \
            else None
        return CausalLMOutputWithPast(logits=logits,
                                      hidden_states=(hidden,) if hidden is not None else None)


def scripted_engine(target: Responder, draft: Responder | None = None, *,
                    draft_sharpness: float = 12.0, config: SpecGuardConfig | None = None,
                    tokenizer_dir: str | Path | None = None) -> SpecGuardEngine:
    """An engine over two `ScriptedLM`s sharing a locally built Qwen-style tokenizer.

    The draft follows `draft` (default: the target's script) with `draft_sharpness`; low sharpness
    means low confidence, so its steps get rejected and the target's script is used instead.
    """
    folder = Path(tokenizer_dir or tempfile.mkdtemp(prefix="specguard-tok-"))
    tok = build_tokenizer(folder)
    draft_lm = ScriptedLM(tok, draft or target, draft_sharpness, name="scripted-draft")
    target_lm = ScriptedLM(tok, target, 12.0, layers=4, name="scripted-target")
    cfg = config or SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256)
    return SpecGuardEngine(draft_lm, tok, target_lm, tok, config=cfg, name="specguard-scripted")
