"""Response formats: what a request's answer must be (any JSON object, or JSON matching a schema),
and the structural check of answer text against it.

`ResponseFormat.of(...)` takes the forms callers pass (OpenAI's `{"type": "json_schema", ...}` and
`{"type": "json_object"}`, `"json"`, or a JSON schema itself); `check_answer` is a pure function the
verifier applies to each answer step, like the schema check of a tool call; `final_text` is the
finished answer as a JSON parser reads it (a ```json fence the check allows taken off).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from specguard_core.text.chat import content_text
from specguard_core.text.errors import FREE_TEXT_LIMIT, quoted
from specguard_core.text.patterns import pattern_problem
from specguard_core.text.schema import check_schema, validator

_FENCE_OPEN = re.compile(r"^```(?:json)?\s*")
_NUMBER_START = re.compile(r"-?\d*\.?\d*(?:[eE][-+]?\d*)?")


@dataclass(frozen=True)
class ResponseFormat:
    """The answer is one JSON object; when `schema` is set it must also validate against it.
    `strict` (OpenAI's `json_schema.strict`): every token is constrained to the schema's grammar
    (`decoding/grammar.py`), so the answer matches it by construction; otherwise the answer steps
    are checked and a draft answer off the format goes to the target."""

    schema: dict[str, Any] | None = None
    name: str = "response"
    strict: bool = False

    @classmethod
    def of(cls, value: Any) -> ResponseFormat | None:
        """None for no format (None, "text", `{"type": "text"}`); raises ValueError for a form it
        does not know or an invalid schema."""
        if value is None or value == "text" or value == {"type": "text"}:
            return None
        if isinstance(value, ResponseFormat):
            return value
        if value in ("json", "json_object") or value == {"type": "json_object"}:
            return cls()
        if not isinstance(value, dict):
            raise ValueError(f"response_format must be 'json', a JSON schema or OpenAI's "
                             f"{{'type': 'json_schema' | 'json_object', ...}}, not "
                             f"{quoted(value)}")
        if value.get("type") == "json_schema":
            spec = value.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
                raise ValueError("response_format {'type': 'json_schema'} needs "
                                 "'json_schema': {'name': ..., 'schema': {...}}")
            schema, name = spec["schema"], str(spec.get("name") or "response")
            strict = spec.get("strict")
            if strict is not None and not isinstance(strict, bool):
                raise ValueError(f"response_format json_schema.strict must be true or false, "
                                 f"not {quoted(strict)}")
        else:
            schema, name, strict = value, str(value.get("title") or "response"), False
        try:
            check_schema(schema)
        except jsonschema.SchemaError as err:
            raise ValueError("response_format has an invalid JSON schema: "
                             f"{quoted(err.message, FREE_TEXT_LIMIT)}; fix the schema (JSON "
                             "Schema 2020-12)") from None
        if (problem := pattern_problem(schema)) is not None:
            raise ValueError(f"response_format has an unusable schema: {problem}")
        return cls(schema, name, bool(strict))


def _unfenced(text: str) -> str:
    body = _FENCE_OPEN.sub("", text.strip(), count=1) if text.strip().startswith("```") else text
    body = body.strip()
    return body[:-3].rstrip() if body.endswith("```") else body


def _cut_off(body: str, err: json.JSONDecodeError) -> bool:
    """Whether the JSON error is only that the text ends too early. (Not pydantic-core's partial
    parsing: `from_json(..., allow_partial=True)` also accepts text that is wrong already, such as
    `{"age": 4x`, returning what it read before the error.)"""
    rest = body[err.pos:].strip()
    return (err.pos >= len(body) or err.msg.startswith("Unterminated string")
            or any(word.startswith(rest) for word in ("true", "false", "null"))
            or _NUMBER_START.fullmatch(rest) is not None)


def check_answer(answer: str, fmt: ResponseFormat, done: bool) -> str | None:
    """Why `answer` (the answer text so far, this step included) breaks `fmt`, or None.

    While the answer is not `done`, JSON cut off at the end is not an error (the next step may
    finish it); prose, a value that is not an object, text after the object and a schema violation
    always are.
    """
    body = _unfenced(answer)
    if not body:
        return "response_format asks for a JSON object, got no answer" if done else None
    try:
        value, end = json.JSONDecoder(strict=False).raw_decode(body)
    except json.JSONDecodeError as err:
        if not done and _cut_off(body, err):
            return None
        return f"response_format asks for JSON, got text that is not JSON: {err.msg}"
    except RecursionError:
        return "response_format asks for JSON, got JSON nested too deeply"
    if body[end:].strip():
        return "response_format asks for one JSON object, got text after it"
    if not isinstance(value, dict):
        return f"response_format asks for a JSON object, got {type(value).__name__}"
    if fmt.schema is not None:
        try:
            validator(fmt.schema).validate(value)  # patterns matched in bounded time
        except jsonschema.ValidationError as err:
            return f"answer does not match the response_format schema: {err.message}"
        except jsonschema.exceptions.SchemaError as err:  # pragma: no cover - checked in `of`
            return f"response_format schema error: {err.message}"
    return None


def final_text(text: str, fmt: ResponseFormat | None) -> str:
    """The finished answer text as the caller gets it: unchanged without a format; under one, the
    JSON itself, so that `json.loads(text)` reads what `check_answer` accepted: a ```json fence
    around it is taken off, and a raw control character inside a string (which the check, like
    most models' readers, tolerates) is escaped by writing the object out again."""
    if fmt is None:
        return text
    body = _unfenced(text)
    try:
        json.loads(body)
    except RecursionError:
        return body
    except ValueError:
        try:
            value, end = json.JSONDecoder(strict=False).raw_decode(body)
        except (ValueError, RecursionError):
            return body  # not JSON (a cut-off or refused answer): the text without its fence
        if not body[end:].strip():
            return json.dumps(value, ensure_ascii=False)
    return body


_JSON_ONLY = "Reply with a single JSON object and nothing else."


def format_instruction(response_format: dict[str, Any]) -> str | None:
    """OpenAI's `response_format` (`json_schema` or `json_object`) as an instruction for the model,
    which neither the engine's check nor a strict format's grammar replaces (a grammar says which
    tokens may come, not what the answer should say); None for any other type (plain text)."""
    kind = response_format.get("type")
    if kind == "json_schema":
        schema = response_format.get("json_schema", {}).get("schema", {})
        return f"{_JSON_ONLY} It must match this JSON schema:\n{json.dumps(schema)}"
    if kind == "json_object":
        return _JSON_ONLY
    return None


def with_instruction(messages: list[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
    """`instruction` appended to the leading system (or developer) message, or added as one; that
    message's content may be a string or a list of text parts (joined as `content_text` joins
    them)."""
    if messages and messages[0]["role"] in ("system", "developer"):
        text = content_text(messages[0].get("content"), "message 0") or ""
        first = {**messages[0], "content": f"{text}\n\n{instruction}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]
