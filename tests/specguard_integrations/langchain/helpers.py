"""A scripted model pair for the LangChain adapter's tests (and sanity tests of the script).

`respond(prompt)` answers from what the chat template rendered: after a `<tool_response>` it gives
a final answer built from the result; with tools offered it calls the tool the user names (else the
first one) with arguments built from that tool's JSON schema and the user's words (numbers in order,
quoted names); asked for JSON it writes an object for the schema or the quoted keys; greetings get a
short `<think>` section and a greeting; arithmetic gets a worked answer. JSON is written with ASCII
escapes (valid JSON, as real models often write it): `ScriptedLM` cannot emit a character that
spans several byte-level tokens (it compares decoded text, and a partial character decodes to
U+FFFD), so its replies stay ASCII. The draft follows the same
script except that its tool calls leave out the required arguments, so the engine rejects them and
the target regenerates those steps (as a weak draft would).

The real pair (`HAVE_REAL`, `REAL_REASON`, `real_engine`) comes from `tests.fixtures`.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from tests.fixtures import HAVE_REAL, REAL_REASON, needs_real, real_engine

__all__ = ["HAVE_REAL", "REAL_REASON", "draft_respond", "make_engine", "needs_real",
           "real_engine", "respond", "shared_engine"]

_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)
_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
_GREETING = re.compile(r"^\W*(hello|hi|hey|how are you)\b", re.IGNORECASE)


def _turns(prompt: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _TURN.finditer(prompt)]


def _tools(prompt: str) -> list[dict[str, Any]]:
    block = _TOOLS.search(prompt)
    text, tools, decoder = (block.group(1).strip() if block else ""), [], json.JSONDecoder()
    while text:  # the template writes one JSON object per tool, newlines or not
        tool, end = decoder.raw_decode(text)
        tools.append(tool["function"])
        text = text[end:].strip()
    return tools


def _quoted(text: str) -> list[str]:
    return [a or b for a, b in _QUOTED.findall(text)]


def _value(schema: dict[str, Any], name: str, text: str, numbers: list[int]) -> Any:
    """A value of `schema`'s type drawn from the user's `text`."""
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return _value(options[0] if options else {"type": "null"}, name, text, numbers)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind in ("integer", "number"):
        return numbers.pop(0) if numbers else 1
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return _object(schema, text)
    if kind == "null":
        return None
    quoted = [q for q in _quoted(text) if q != name]
    return quoted[0] if quoted else " ".join(text.split()[:6]).strip(" .?!")


def _object(schema: dict[str, Any], text: str) -> dict[str, Any]:
    numbers = [int(n) for n in re.findall(r"-?\d+", text)]
    props = schema.get("properties", {})
    return {name: _value(prop, name, text, numbers) for name, prop in props.items()}


def _call(tools: list[dict[str, Any]], user: str, sloppy: bool) -> str:
    tool = next((t for t in tools if t["name"] in user), tools[0])
    params = tool.get("parameters", {})
    args = {} if sloppy and params.get("required") else _object(params, user)
    # characters as they are, not \u escapes: as chat templates render calls (`tojson`), and all a
    # constrained call's grammar allows
    payload = json.dumps({"name": tool["name"], "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{payload}\n</tool_call>"


def _json_answer(system: str, user: str) -> str:
    marker = "JSON schema:\n"
    if marker in system:
        return json.dumps(_object(json.loads(system.split(marker, 1)[1]), user))
    keys = [q for q in _quoted(user) if q.isidentifier()] or ["answer"]
    return json.dumps({key: f"the {key}" for key in keys})


def _arithmetic(user: str) -> str | None:
    m = re.search(r"(-?\d+)\s*([+*-])\s*(-?\d+)", user)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return f"{a} {op} {b} = {value}.\n\nThe answer is {value}."


def _text_answer(system: str, user: str) -> str:
    if "json" in (system + user).lower():
        return _json_answer(system, user)
    if _GREETING.search(user):
        return "<think>\nThe user greets me.\n</think>\n\nHello! How can I help you today?"
    return _arithmetic(user) or f"You said: {' '.join(user.split()[:12])}"


def respond(prompt: str, sloppy: bool = False) -> str:
    """The assistant's whole reply to the rendered `prompt` (see the module docstring)."""
    turns = _turns(prompt)
    system = "\n".join(text for role, text in turns if role == "system")
    last = next((text for role, text in reversed(turns) if role == "user"), "")
    if last.startswith("<tool_response>"):
        result = last.removeprefix("<tool_response>").removesuffix("</tool_response>").strip()
        return f"The tool returned {result}.\n\nSo the answer is {result}."
    tools = _tools(prompt)
    if tools:
        return _call(tools, last, sloppy)
    return _text_answer(system, last)


def draft_respond(prompt: str) -> str:
    return respond(prompt, sloppy=True)


@functools.cache
def shared_engine() -> SpecGuardEngine:
    """One scripted engine for the whole session (building its tokenizer takes a moment)."""
    return make_engine()


def make_engine(draft_sharpness: float = 12.0) -> SpecGuardEngine:
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256)
    return scripted_engine(respond, draft_respond, draft_sharpness=draft_sharpness, config=cfg)
