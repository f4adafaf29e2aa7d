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
from typing import Any

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
    ToolChoice,
    normalise_messages,
    offered_tools,
    render_prompt,
)
from specguard_core.text.errors import PromptTooLong
from specguard_core.text.formats import ResponseFormat
from specguard_core.text.steps import StepRules


def open_request(pair: Pair, messages_or_prompt: str | Sequence[Message], *,
                 tools: Sequence[dict[str, Any]] | None, tool_choice: ToolChoice,
                 response_format: Any, config: SpecGuardConfig, timeout: float | None,
                 chat_template_kwargs: Mapping[str, Any] | None,
                 overrides: Mapping[str, Any], parallel_tool_calls: bool = True) -> Request:
    """The request for `messages_or_prompt` under `config` with `overrides` of its fields (see
    `SpecGuardEngine.stream` for the rest): both models' prompts pending in its fresh caches, its
    deadline `timeout` seconds from now."""
    if timeout is not None and not timeout > 0:
        raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(parallel_tool_calls, bool):
        raise InputError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
    cfg = config.merged(**overrides)
    if not isinstance(pair.target, CachedModel):
        check_served_target(cfg)
    cfg = pair.judge.resolve_verifier(cfg)
    try:
        fmt = ResponseFormat.of(response_format)
    except ValueError as err:
        raise InputError(str(err)) from None
    messages = normalise_messages(messages_or_prompt)
    checked, required = offered_tools(tools, tool_choice)
    plan = pair.judge.plan(cfg, bool(checked))  # a verifier card is loaded whole and checked here
    prompts = [_prompt(h, messages, checked, chat_template_kwargs)
               for h in (pair.draft, pair.target)]
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
    )
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


def _prompt(handle: Target, messages: list[Message], tools: list[dict[str, Any]],
            template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The chat-templated prompt as `handle` tokenizes it; one that fills its context window is
    a `PromptTooLong` (an InputError)."""
    ids = handle.encode(render_prompt(handle.tokenizer, messages, tools, template_kwargs))
    window = handle.context_window
    if window and len(ids) >= window:
        raise PromptTooLong(len(ids), window, handle.name)
    return ids

