"""The reply's grammar when a request opens (`run/start.py`): the answer's format from OpenAI's
`response_format` or vLLM's `structured_outputs`, the grammar a constrained format holds the
reply to (the answer, or with tools offered the answer or the tools' calls, after an optional
think block), and the grammar of the tool calls alone (an owed call, strict tools). Each is
compiled by llguidance through the engine's `GrammarIndex`; what cannot be honoured is an
`InputError` that says what to ask for instead.
"""

from __future__ import annotations

from typing import Any

from specguard_core.cache.model import CachedModel
from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.reply_grammar import ANSWER, reply_grammar
from specguard_core.decoding.tool_grammar import call_format, calls_lark, strict_tools, think_terms
from specguard_core.engine.run.step import Pair
from specguard_core.text.errors import InputError
from specguard_core.text.formats import ResponseFormat
from specguard_core.text.steps import StepRules


def answer_format(response_format: Any, structured_outputs: Any) -> ResponseFormat | None:
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


def reply_grammar_for(pair: Pair, fmt: ResponseFormat, rules: StepRules,
                   tools: list[dict[str, Any]], required: str | None, start: int) -> Grammar:
    """The grammar of a reply under a constrained format (from token `start`): the answer, or,
    with tools offered, the answer or the tools' calls (only calls while one is owed), after an
    optional think block. It holds where both models read one vocabulary and the target runs in
    process; calls beside the answer need the template's call markers."""
    what, instead = _constrained(fmt)
    if not pair.judge.same_vocab or not isinstance(pair.target, CachedModel):
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


def call_grammar(pair: Pair, rules: StepRules, tools: list[dict[str, Any]],
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
