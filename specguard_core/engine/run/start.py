"""A request from the caller's input (`open_request`): everything checked up front, then the
`Request` that the engine's steps run on.

The timeout, the per-request configuration (a served target refuses what it cannot do), the
verifier it names (a card loaded and checked against its model: a `CardError`), the response
format (or structured output), the messages, the tools and the tool choice, and each model's
prompt against its context window: every bad input is an `InputError` that says what to do,
raised before any model runs. The reply's grammar is compiled here too (`run/grammars.py`): a
constrained format's (with the tools' calls as its alternative) or the tool calls'.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import Target
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.engine.request import Request
from specguard_core.engine.run.grammars import answer_format, call_grammar, reply_grammar_for
from specguard_core.engine.run.step import Pair
from specguard_core.remote.target import check_served_target
from specguard_core.text.chat import (
    InputError,
    Message,
    RawPrompt,
    ToolChoice,
    continues,
    normalise_messages,
    offered_tools,
    render_prompt,
)
from specguard_core.text.errors import PromptTooLong
from specguard_core.text.steps import StepRules

MAX_TOP_LOGPROBS = 20  # alternatives per token at most (vLLM's default --max-logprobs)


@dataclass(frozen=True)
class Reading:
    """How a request reads its input and reports log-probabilities (`SpecGuardEngine.stream`):
    continue the final assistant message (None: when there is one), the alternatives recorded
    per token, and whether the target scores the prompt ("only": and nothing is written)."""

    continue_final_message: bool | None = None
    top_logprobs: int = 0
    prompt_logprobs: bool | Literal["only"] = False

    def check(self) -> None:
        if self.continue_final_message not in (None, True, False):
            raise InputError("continue_final_message must be true, false or None (None: continue "
                             "a final assistant message)")
        if isinstance(self.top_logprobs, bool) or not isinstance(self.top_logprobs, int) or \
                not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise InputError(f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}")
        if self.prompt_logprobs not in (True, False, "only"):
            raise InputError("prompt_logprobs must be true, false or 'only'")


def open_request(pair: Pair, messages_or_prompt: str | Sequence[Message] | RawPrompt, *,
                 tools: Sequence[dict[str, Any]] | None, tool_choice: ToolChoice,
                 response_format: Any, config: SpecGuardConfig, timeout: float | None,
                 chat_template_kwargs: Mapping[str, Any] | None,
                 overrides: Mapping[str, Any], parallel_tool_calls: bool = True,
                 reading: Reading = Reading(), structured_outputs: Any = None) -> Request:
    """The request for `messages_or_prompt` under `config` with `overrides` of its fields (see
    `SpecGuardEngine.stream` for the rest): both models' prompts pending in its fresh caches, its
    deadline `timeout` seconds from now."""
    if timeout is not None and not timeout > 0:
        raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(parallel_tool_calls, bool):
        raise InputError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
    reading.check()
    cfg = config.merged(**overrides)
    if not isinstance(pair.target, CachedModel):
        check_served_target(cfg)
    cfg = pair.judge.resolve_verifier(cfg)
    fmt = answer_format(response_format, structured_outputs)
    checked, required = offered_tools(tools, tool_choice)
    plan = pair.judge.plan(cfg, bool(checked))  # a verifier card is loaded whole and checked here
    prompts, prefill = prompt_ids(pair, messages_or_prompt, checked, chat_template_kwargs,
                                  reading.continue_final_message)
    req = Request(
        cfg=cfg, tools=checked, required=required, plan=plan,
        rules=StepRules.for_tokenizer(pair.target.tokenizer, cfg.step_delimiters)
        .with_tools(() if fmt else [t["function"]["name"] for t in checked]),
        draft=pair.draft.new_state(), target=pair.target.new_state(),
        generator=torch.Generator(pair.draft.device).manual_seed(cfg.seed),
        prompt_tokens=len(prompts[1]), context_window=pair.context_window,
        tokenizer=pair.target.tokenizer, response_format=fmt, timeout=timeout,
        response_template=pair.response_template, parallel_tool_calls=parallel_tool_calls,
        deadline=None if timeout is None else time.monotonic() + timeout,
        top_logprobs=reading.top_logprobs, prompt_logprobs=bool(reading.prompt_logprobs),
        draft_prompt_tokens=len(prompts[0]),
    )
    req.in_think = prefill.rfind(req.rules.think_open) > prefill.rfind(req.rules.think_close)
    if reading.prompt_logprobs == "only":
        req.finish = "length"  # the prompt's pass is all it asks for (vLLM's max_tokens=0)
    req.draft.pending, req.target.pending = prompts
    if fmt is not None and fmt.constrained(cfg.response_format_mode):
        req.grammar = reply_grammar_for(pair, fmt, req.rules, checked, required, len(prompts[1]))
        return req
    if fmt is not None:
        req.answer_check = AnswerCheck(fmt)
    if checked:
        req.grammar = call_grammar(pair, req.rules, checked, required, len(prompts[1]))
    return req


def prompt_ids(pair: Pair, prompt: str | Sequence[Message] | RawPrompt,
               tools: list[dict[str, Any]], template_kwargs: Mapping[str, Any] | None = None,
               continue_final: bool | None = None, *, draft: bool = True
               ) -> tuple[list[list[int]], str]:
    """The draft's (unless `draft=False`) and the target's prompt ids (a raw prompt as it is,
    else chat-templated), and the assistant text the reply continues ("" when it starts a new
    turn). A prompt that fills a model's context window is an InputError."""
    if not isinstance(prompt, RawPrompt):
        messages = normalise_messages(prompt)
        cont = continues(messages, continue_final)
        handles = (pair.draft, pair.target) if draft else (pair.target,)
        ids = [_window(h, h.encode(render_prompt(h.tokenizer, messages, tools, template_kwargs,
                                                 cont))) for h in handles]
        return ids, str(messages[-1]["content"]) if cont else ""
    if tools or template_kwargs or continue_final:
        raise InputError("a raw prompt is not rendered with the chat template: it takes no tools, "
                         "chat_template_kwargs or continue_final_message; send messages instead")
    target = _raw_ids(pair.target, prompt)
    vocab = len(pair.target.tokenizer)
    if any(not 0 <= t < vocab for t in target):
        raise InputError(f"the prompt holds a token id outside the vocabulary (0 to {vocab - 1})")
    if not draft:
        return [_window(pair.target, target)], ""
    if pair.judge.same_vocab:
        draft_ids = list(target)
    elif prompt.text is not None:
        draft_ids = _raw_ids(pair.draft, prompt)
    else:  # the draft reads the same text in its own vocabulary
        draft_ids = pair.draft.encode(pair.target.decode(target))
    return [_window(pair.draft, draft_ids), _window(pair.target, target)], ""


def _raw_ids(handle: Target, prompt: RawPrompt) -> list[int]:
    if prompt.token_ids is not None:
        return list(prompt.token_ids)
    assert prompt.text is not None
    if not prompt.add_special_tokens:
        return handle.encode(prompt.text)
    return list(handle.tokenizer(prompt.text, add_special_tokens=True)["input_ids"])


def _window(handle: Target, ids: list[int]) -> list[int]:
    """`ids`, checked to leave room in `handle`'s context window (an InputError if not)."""
    window = handle.context_window
    if window and len(ids) >= window:
        raise PromptTooLong(len(ids), window, handle.name)
    return ids

