"""A request from the caller's input (`open_request`): everything checked up front, then the
`Request` that the engine's steps run on.

The timeout, the per-request configuration (a served target refuses what it cannot do), the
verifier it names, the response format (or structured output), the messages, the tools and the
tool choice, and each model's prompt against its context window: every bad input is an
`InputError` that says what to do, raised before any model runs. The reply's grammar is compiled
here too: a constrained format's (with the tools' calls as its alternative) or the tool calls'.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import Target
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.reply_grammar import ANSWER, reply_grammar
from specguard_core.decoding.tool_grammar import call_format, calls_lark, strict_tools, think_terms
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
from specguard_core.text.formats import ResponseFormat
from specguard_core.text.steps import StepRules


def open_request(pair: Pair, messages_or_prompt: str | Sequence[Message], *,
                 tools: Sequence[dict[str, Any]] | None, tool_choice: ToolChoice,
                 response_format: Any, config: SpecGuardConfig, timeout: float | None,
                 chat_template_kwargs: Mapping[str, Any] | None,
                 overrides: Mapping[str, Any], parallel_tool_calls: bool = True,
                 structured_outputs: Any = None) -> Request:
    """The request for `messages_or_prompt` under `config` with `overrides` of its fields (see
    `SpecGuardEngine.stream` for the rest): both models' prompts pending in its fresh caches, its
    deadline `timeout` seconds from now."""
    if timeout is not None and not timeout > 0:
        raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(parallel_tool_calls, bool):
        raise InputError(f"parallel_tool_calls must be true or false, got {parallel_tool_calls!r}")
    cfg = config.merged(**overrides)
    if not isinstance(pair.target, ModelHandle):
        check_served_target(cfg)
    cfg = pair.judge.resolve_verifier(cfg)
    fmt = _format(response_format, structured_outputs)
    messages = normalise_messages(messages_or_prompt)
    checked, required = offered_tools(tools, tool_choice)
    prompts = [_prompt(h, messages, checked, chat_template_kwargs)
               for h in (pair.draft, pair.target)]
    req = Request(
        cfg=cfg, tools=checked, required=required,
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
    if fmt is not None and fmt.constrained(cfg.response_format_mode):
        req.grammar = _reply_grammar(pair, fmt, req.rules, checked, required, len(prompts[1]))
        return req
    if fmt is not None:
        req.answer_check = AnswerCheck(fmt)
    if checked:
        req.grammar = _call_grammar(pair, req.rules, checked, required, len(prompts[1]))
    return req


def _format(response_format: Any, structured_outputs: Any) -> ResponseFormat | None:
    """The answer's format from OpenAI's `response_format` or vLLM's `structured_outputs` (one
    of them)."""
    try:
        fmt = ResponseFormat.of(response_format)
        structured = ResponseFormat.structured(structured_outputs)
    except ValueError as err:
        raise InputError(str(err)) from None
    if fmt is not None and structured is not None:
        raise InputError("response_format and structured_outputs both constrain the answer; "
                         "pass one of them")
    return fmt or structured


def _reply_grammar(pair: Pair, fmt: ResponseFormat, rules: StepRules,
                   tools: list[dict[str, Any]], required: str | None, start: int) -> Grammar:
    """The grammar of a reply under a constrained format (from token `start`): the answer, or,
    with tools offered, the answer or the tools' calls (only calls while one is owed), after an
    optional think block. It holds where both models read one vocabulary and the target runs in
    process; calls beside the answer need the template's call markers."""
    what, instead = _constrained(fmt)
    if not pair.judge.same_vocab or not isinstance(pair.target, ModelHandle):
        raise InputError(f"{what} is enforced by constrained decoding, which needs an "
                         "in-process target sharing the draft's vocabulary"
                         + (f"; {instead}" if instead else " (this pair has none)"))
    calls = None
    if tools:
        markers = call_format(pair.target.tokenizer, rules.tool_open, rules.tool_close)
        if markers is None:
            raise InputError(f"{what} with tools needs one grammar for the answer or a tool "
                             "call, and this chat template has no tool-call markers to say where "
                             "a call goes; offer no tools (or tool_choice='none')"
                             + (f", or {instead}" if instead else ""))
        calls = calls_lark(tools, required, markers, answer=ANSWER)
    try:
        grammar = reply_grammar(fmt, calls, think_terms(pair.target.tokenizer))
        return pair.grammars.for_grammar(grammar, start, what, "simplify it"
                                         + (f", or {instead}" if instead else ""))
    except ValueError as err:
        raise InputError(str(err)) from None


def _constrained(fmt: ResponseFormat) -> tuple[str, str]:
    """(what the constrained format is, what else the caller can ask for) for its errors."""
    if fmt.origin == "structured_outputs":
        return f"structured_outputs.{fmt.kind}", ""
    if fmt.strict:
        return ("response_format (strict)", "drop 'strict' and set response_format_mode='check' "
                "(the answer is then checked step by step, not constrained)")
    return ("response_format", "set response_format_mode='check' (the answer is then checked "
            "step by step, not constrained)")


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
           if pair.judge.same_vocab and isinstance(pair.target, ModelHandle) else None)
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
    an InputError."""
    ids = handle.encode(render_prompt(handle.tokenizer, messages, tools, template_kwargs))
    window = handle.context_window
    if window and len(ids) >= window:
        raise InputError(f"the prompt has {len(ids)} tokens but {handle.name}'s context window "
                         f"is {window}; shorten the conversation or drop earlier messages")
    return ids

