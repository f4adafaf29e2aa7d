"""A request from the caller's input (`open_request`): everything checked up front, then the
`Request` that the engine's steps run on.

The timeout, the per-request configuration (a served target refuses what it cannot do), the
verifier it names (a card loaded and checked against its model: a `CardError`), the response
format, the messages, the tools and the tool choice, and each model's prompt against its context
window: every bad input is an `InputError` that says what to do, raised before any model runs.
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
from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.tool_grammar import call_format, calls_lark, strict_tools
from specguard_core.engine.request import Request
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
from specguard_core.text.formats import ResponseFormat
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
                 reading: Reading = Reading()) -> Request:
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
    try:
        fmt = ResponseFormat.of(response_format)
    except ValueError as err:
        raise InputError(str(err)) from None
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
    if fmt is not None and fmt.strict:
        req.grammar = _grammar(pair, fmt, checked, len(prompts[1]))
    elif checked:
        req.grammar = _call_grammar(pair, req.rules, checked, required, len(prompts[1]))
    return req


def _grammar(pair: Pair, fmt: ResponseFormat, tools: list[dict[str, Any]], start: int) -> Grammar:
    """The strict format's grammar over the reply (from token `start`), where it can hold: both
    models read one vocabulary, the target runs in process, and no tool is offered (a call
    could not be written)."""
    if not pair.judge.same_vocab or not isinstance(pair.target, CachedModel):
        raise InputError("a strict response_format needs an in-process target sharing the "
                         "draft's vocabulary; drop 'strict' (the answer is then checked, not "
                         "constrained)")
    if tools:
        raise InputError("a strict response_format leaves no room for tool calls; offer no "
                         "tools (or tool_choice='none'), or drop 'strict'")
    try:
        return pair.grammars.for_schema(fmt.schema, start)
    except ValueError as err:
        raise InputError(str(err)) from None


def _call_grammar(pair: Pair, rules: StepRules, tools: list[dict[str, Any]],
                  required: str | None, start: int) -> Grammar | None:
    """The grammar of the reply's tool calls (`decoding.tool_grammar`): a call owed under
    `required`, or strict tools' arguments; None when neither applies, or when a forced call
    cannot be constrained (a served target, a heterogeneous pair, a template without call
    markers, a schema llguidance cannot compile: the call is then started by its prefix and
    checked). Strict tools that cannot be honoured are an InputError."""
    strict = strict_tools(tools)
    if required is None and not strict:
        return None
    fmt = (call_format(pair.target.tokenizer, rules.tool_open, rules.tool_close)
           if pair.judge.same_vocab and isinstance(pair.target, CachedModel) else None)
    lark = calls_lark(tools, required, fmt) if fmt is not None else None
    if lark is None:
        if strict:
            raise InputError("strict function tools need an in-process target sharing the "
                             "draft's vocabulary and a chat template with <tool_call> markers; "
                             "drop 'strict' from the tools (their calls are then checked, not "
                             "constrained)")
        return None
    try:
        return pair.grammars.for_lark(lark, start, "the tools' parameter schemas")
    except ValueError as err:
        if strict:
            raise InputError(str(err)) from None
        return None


def prompt_ids(pair: Pair, prompt: str | Sequence[Message] | RawPrompt,
               tools: list[dict[str, Any]], template_kwargs: Mapping[str, Any] | None = None,
               continue_final: bool | None = None) -> tuple[list[list[int]], str]:
    """The draft's and the target's prompt ids (a raw prompt as it is, else chat-templated), and
    the assistant text the reply continues ("" when it starts a new turn). A prompt that fills
    a model's context window is an InputError."""
    if not isinstance(prompt, RawPrompt):
        messages = normalise_messages(prompt)
        cont = continues(messages, continue_final)
        ids = [_window(h, h.encode(render_prompt(h.tokenizer, messages, tools, template_kwargs,
                                                 cont))) for h in (pair.draft, pair.target)]
        return ids, str(messages[-1]["content"]) if cont else ""
    if tools or template_kwargs or continue_final:
        raise InputError("a raw prompt is not rendered with the chat template: it takes no tools, "
                         "chat_template_kwargs or continue_final_message; send messages instead")
    target = _raw_ids(pair.target, prompt)
    vocab = len(pair.target.tokenizer)
    if any(not 0 <= t < vocab for t in target):
        raise InputError(f"the prompt holds a token id outside the vocabulary (0 to {vocab - 1})")
    if pair.judge.same_vocab:
        draft = list(target)
    elif prompt.text is not None:
        draft = _raw_ids(pair.draft, prompt)
    else:  # the draft reads the same text in its own vocabulary
        draft = pair.draft.encode(pair.target.decode(target))
    return [_window(pair.draft, draft), _window(pair.target, target)], ""


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

