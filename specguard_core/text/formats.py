"""Response formats: what a request's answer must be, and the answer text the caller gets.

`ResponseFormat.of(...)` takes the forms callers pass as `response_format` (OpenAI's
`{"type": "json_schema", ...}` and `{"type": "json_object"}`, `"json"`, or a JSON schema itself);
`ResponseFormat.structured(...)` takes vLLM's `structured_outputs` (`choice`, `regex`, `json`,
`grammar`, or `json_object: true`). The engine enforces a format with a grammar over the reply
(`decoding/reply_grammar.py`) or, on the check-only path, checks each answer step against it
(`decoding/answer_check.py`); `final_text` is the finished answer as the caller gets it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from specguard_core.text.chat import content_text
from specguard_core.text.errors import quoted
from specguard_core.text.schema import schema_problem

FormatKind = Literal["json", "regex", "choice", "grammar"]
FormatMode = Literal["constrain", "check"]  # `SpecGuardConfig.response_format_mode`
STRUCTURED = ("choice", "regex", "json", "grammar", "json_object")  # vLLM's structured_outputs
_FENCE_OPEN = re.compile(r"^```(?:json)?\s*")


@dataclass(frozen=True)
class ResponseFormat:
    """What the answer must be. `kind` "json": one JSON object, matching `schema` when it is set;
    "regex": text `source` matches whole; "choice": one of `choices`; "grammar": text in the
    grammar `source` (Lark or GBNF, as llguidance reads them). `strict`: always constrained by
    the grammar (OpenAI's `json_schema.strict`; every structured output); other JSON formats are
    constrained under `response_format_mode="constrain"` (the default) and checked step by step
    under "check" (`constrained`)."""

    schema: dict[str, Any] | None = None
    name: str = "response"
    strict: bool = False
    kind: FormatKind = "json"
    source: str = ""  # regex: the pattern; grammar: the grammar's text
    choices: tuple[str, ...] = ()  # choice: the answers allowed
    origin: Literal["response_format", "structured_outputs"] = "response_format"  # the field

    def constrained(self, mode: FormatMode) -> bool:
        """Whether the grammar constrains the reply under `mode` (else answer steps are checked)."""
        return self.strict or self.kind != "json" or mode == "constrain"

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
        return cls(_checked(schema, "response_format"), name, bool(strict))

    @classmethod
    def structured(cls, value: Any) -> ResponseFormat | None:
        """vLLM's `structured_outputs` (None: none): exactly one of `choice` (non-empty strings),
        `regex`, `json` (a JSON schema, as an object or its JSON text), `grammar` (Lark or
        GBNF) or `json_object: true`; always constrained. Raises ValueError naming the rule."""
        if value is None:
            return None
        usage = ("structured_outputs takes exactly one of choice (a list of non-empty strings), "
                 "regex (a string), json (a JSON schema), grammar (Lark or GBNF text) or "
                 "json_object: true")
        if not isinstance(value, Mapping) or set(value) - set(STRUCTURED):
            raise ValueError(usage)
        given = [k for k in STRUCTURED if value.get(k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(usage)
        kind, spec = given[0], value[given[0]]
        out = cls(strict=True, origin="structured_outputs")
        if kind == "json_object" and spec is True:
            return out
        if kind == "json":
            schema = _schema_text(spec) if isinstance(spec, str) else spec
            if isinstance(schema, dict):
                return replace(out, schema=_checked(schema, "structured_outputs.json"))
        if kind == "choice" and isinstance(spec, list) and spec and \
                all(isinstance(c, str) and c for c in spec):
            return replace(out, kind="choice", choices=tuple(spec))
        if kind == "regex" and isinstance(spec, str) and spec:
            return replace(out, kind="regex", source=spec)
        if kind == "grammar" and isinstance(spec, str) and spec.strip():
            return replace(out, kind="grammar", source=spec)
        raise ValueError(usage)


def _schema_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("structured_outputs.json must be a JSON schema (an object, or its "
                         "JSON text)") from None


def _checked(schema: dict[str, Any], where: str) -> dict[str, Any]:
    """`schema`, usable (`schema.schema_problem`); else a ValueError saying what to fix."""
    if (problem := schema_problem(schema, where)) is not None:
        raise ValueError(problem)
    return schema


def _unfenced(text: str) -> str:
    """The text without a Markdown fence around it (the check-only path lets one through)."""
    body = _FENCE_OPEN.sub("", text.strip(), count=1) if text.strip().startswith("```") else text
    body = body.strip()
    return body[:-3].rstrip() if body.endswith("```") else body


def final_text(text: str, fmt: ResponseFormat | None) -> str:
    """The finished answer text as the caller gets it: unchanged without a format or under a
    regex, choice or grammar; under a JSON format, the JSON itself, so that `json.loads(text)`
    reads it: a ```json fence around it (which the check-only path lets through) is taken off,
    and a raw control character inside a string is escaped by writing the object out again."""
    if fmt is None or fmt.kind != "json":
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
    which neither the grammar nor the check replaces (a grammar says which tokens may come, not
    what the answer should say); None for any other type (plain text)."""
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
