"""How the server words its errors: a validation error names the field and the rule, never the
value sent; a failed generation's details (paths, internal model names, a target URL's
credentials) go to the log, not to the client.

The engine's input errors are written for a library's caller: they name the field and the rule,
and show a value they refuse (a tool's name, a role, a template's or JSON-schema error's text)
only through `specguard_core.text.errors.quoted`, short printable ASCII in repr quotes.
`client_safe` rewords one for a remote client: every quoted value that is not a word of the API
becomes "(not repeated)", a served model's name "the model", and a message that still holds a
string the client sent (a config error's, say) becomes a generic one naming the field. A prompt
over the context window is answered as OpenAI answers it (`context_length_exceeded`), so clients
that trim and retry on it (LangChain's `ContextOverflowError`) do.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from specguard.serve.api.extension import ExperimentalKnobs, SpecGuardExtension
from specguard.serve.api.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    StreamOptions,
)
from specguard.serve.api.untrusted import redact, safe_name
from specguard.serve.http.slots import APIError
from specguard_core.config import EXPERIMENTAL, EngineConfig, SpecGuardConfig
from specguard_core.remote.http import RemoteTargetError
from specguard_core.text.chat import InputError
from specguard_core.text.errors import PromptTooLong

log = logging.getLogger("specguard.serve")


def validation_message(err: ValidationError) -> tuple[str, str | None]:
    """The first problem, naming the field and the rule, never the value sent."""
    first = err.errors()[0]
    loc = [safe_name(p) for p in first.get("loc", ())]
    param = ".".join(loc) or None
    if loc[:1] == ["specguard"] and len(loc) > 1:
        return _extension_message(loc, first.get("type")) or f"{param}: {first.get('msg')}", \
            "specguard"
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param
    if first.get("type") == "missing":
        return f"Missing required parameter: {param!r}", param
    return f"{param}: {first.get('msg')}", param


def _extension_message(loc: list[str], kind: Any) -> str | None:
    if kind != "extra_forbidden":
        return None
    name, where = loc[-1], ".".join(loc)
    if name in EngineConfig.model_fields:
        return f"{where} is an engine setting, fixed when the server starts; a request cannot set it"
    if name in SpecGuardConfig.model_fields or name in EXPERIMENTAL:
        return (f"{where} is the server operator's (`specguard serve --set`): a request may not "
                "name models, paths or loader options")
    return f"{where} is not a SpecGuard knob; a request may set {sorted(SpecGuardExtension.model_fields)}"


# the words of the API (its field names, the values its messages quote in their hints): not a
# client's own text
VOCABULARY = frozenset({
    "type", "function", "name", "arguments", "text", "content", "role", "system", "user",
    "assistant", "tool", "tools", "messages", "developer", "auto", "none", "required", "object",
    "string", "integer", "number", "boolean", "array", "null", "properties", "parameters",
    "description", "image_url", "input_audio", "file", "enable_thinking", "target", "draft",
    "paper", "greedy", "sample", "speculative", "sentence-transformer", "utf-8", "...", "strict",
    "items", "enum", "additionalProperties", "json_schema", "json_object", "schema", "tool_calls",
    "tool_call_id", "refusal", "constrain", "check", "choice", "grammar",
}) | frozenset(name for model in (ChatCompletionRequest, CompletionRequest, ChatMessage,
                                  StreamOptions, SpecGuardExtension, ExperimentalKnobs)
               for name in model.model_fields)
HIDDEN = "(not repeated)"
# a quoted repr (a str's, not an apostrophe), and the "..." after one `quoted` cut short
_QUOTED = re.compile(r"(?<!\w)(?P<repr>'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")(?:\.\.\.)?")
_FIELDS = (("tool_choice", "tool_choice"), ("chat_template_kwargs", "chat_template_kwargs"),
           ("response_format", "response_format"), ("structured_outputs", "structured_outputs"),
           ("tool", "tools"), ("two tools", "tools"), ("message", "messages"),
           ("the prompt", "messages"), ("the chat template", "messages"))


def client_strings(value: Any, shortest: int = 6) -> frozenset[str]:
    """The strings (keys too) of a decoded request body that could identify what a client sent:
    at least `shortest` characters and not a word of the API."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= shortest and item not in VOCABULARY:
                out.add(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return frozenset(out)


def _unquoted(match: re.Match[str]) -> str:
    try:
        value = ast.literal_eval(match.group("repr"))
    except (ValueError, SyntaxError):
        return HIDDEN
    return match.group(0) if value in VOCABULARY else HIDDEN


def field_of(message: str) -> str | None:
    """The request field an engine's input error is about, from its first words."""
    return next((param for prefix, param in _FIELDS if message.startswith(prefix)), None)


def _holds(message: str, text: str) -> bool:
    """`text` occurs in `message`, not as a part of a longer word."""
    start = message.find(text)
    while start >= 0:
        end = start + len(text)
        if not (start and message[start - 1].isalnum() or end < len(message) and
                message[end].isalnum()):
            return True
        start = message.find(text, start + 1)
    return False


def client_safe(message: str, sent: Iterable[str] = (), hidden: Iterable[str] = ()) -> str:
    """`message` (an engine's input error) worded for a remote client: no value it quotes, no
    string in `sent` (what the client sent: `client_strings`), each name in `hidden` (the served
    models') as "the model"."""
    for name in hidden:
        message = message.replace(name, "the model") if name else message
    message = _QUOTED.sub(_unquoted, message)
    if any(_holds(message, s) for s in sent):
        field = field_of(message) or "the request"
        return (f"the engine's input checks refused {field} (their message would repeat text "
                f"sent, so it is not shown); check {field} against the API's format")
    return message


def context_length_exceeded(err: PromptTooLong) -> APIError:
    """A prompt over the context window as OpenAI words it: a 400 with code
    `context_length_exceeded` on `messages`."""
    window, tokens = err.context_window, err.prompt_tokens
    over = (f"your messages resulted in {tokens} tokens" if tokens > window else
            f"your messages resulted in {tokens} tokens, which leaves no room for the completion")
    return APIError(400, f"This model's maximum context length is {window} tokens. However, "
                    f"{over}. Please reduce the length of the messages.", param="messages",
                    code="context_length_exceeded")


def failure(err: Exception, sent: Iterable[str] = (), hidden: Iterable[str] = ()) -> APIError:
    """A failed generation as the client sees it: a prompt over the context window as OpenAI
    answers it, other bad input a 400 with its message (worded by `client_safe`); a served
    target's failure a 502, anything else a 500, both without details (they are logged)."""
    if isinstance(err, PromptTooLong):
        return context_length_exceeded(err)
    if isinstance(err, InputError):
        return APIError(400, client_safe(str(err), sent, hidden), param=field_of(str(err)))
    if isinstance(err, RemoteTargetError):
        log.error("the target model's server failed: %s", redact(str(err)))
        return APIError(502, "generation failed: the target model's server could not be used "
                        "(unreachable, timed out or failed); the server's log has the details",
                        "server_error")
    log.error("generation failed: %s", redact(f"{type(err).__name__}: {err}"))
    return APIError(500, f"generation failed ({type(err).__name__}); the server's log has the "
                    "details", "server_error")
