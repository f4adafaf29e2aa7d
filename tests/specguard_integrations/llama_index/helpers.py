"""The scripted model pair behind the LlamaIndex adapter's tests (and sanity tests of the script).

`respond(prompt)` answers from what the chat template rendered:
- after a `<tool_response>`: a final answer quoting the tool's result;
- ReAct prompts (`Action Input:` in the system prompt): an action, then after an `Observation:`
  a final `Answer:`;
- RAG prompts (`Context information is below`): an answer quoting the context's first line;
- with tools offered: a Hermes tool call of the tool the user names (else the first), arguments
  built from its JSON schema and the user's words (numbers in order, quoted strings);
- "count to N": N one-line steps (a long answer, for cancellation tests);
- otherwise a short `<think>` section and a two-step answer.
`weak_draft` follows the same script but leaves tool-call arguments out, so the engine rejects
those steps and the target regenerates them (as a weak draft would).
The real pair (`HAVE_REAL`, `REAL_REASON`, `real_engine`) comes from `tests.fixtures`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from tests.fixtures import HAVE_REAL, REAL_REASON, real_engine

__all__ = ["HAVE_REAL", "REAL_REASON", "WEATHER", "make_engine", "real_engine", "respond",
           "weak_draft"]

GREETING = "<think>A simple greeting.\n\nNo tools needed.</think>Hello there.\n\nThe answer is 7."
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def turns(prompt: str) -> list[tuple[str, str]]:
    """(role, content) of each rendered turn, the open assistant turn last."""
    return [(m.group(1), m.group(2)) for m in _TURN.finditer(prompt)]


def offered_tools(prompt: str) -> list[dict[str, Any]]:
    block = _TOOLS.search(prompt)
    text, tools, decoder = (block.group(1).strip() if block else ""), [], json.JSONDecoder()
    while text:
        tool, end = decoder.raw_decode(text)
        tools.append(tool["function"])
        text = text[end:].strip()
    return tools


def _arguments(schema: dict[str, Any], text: str) -> dict[str, Any]:
    numbers = [float(n) for n in _NUMBER.findall(text)]
    quoted = [a or b for a, b in _QUOTED.findall(text)]
    args: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type")
        if kind in ("integer", "number") and numbers:
            value = numbers.pop(0)
            args[name] = int(value) if kind == "integer" else value
        elif kind == "boolean":
            args[name] = True
        else:
            args[name] = quoted.pop(0) if quoted else name
    return args


def tool_call(name: str, args: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def _call_for(tools: list[dict[str, Any]], user: str) -> str:
    named = [t for t in tools if t["name"].lower() in user.lower()]
    tool = (named or tools)[0]
    return tool_call(tool["name"], _arguments(tool.get("parameters", {}), user))


def _react(system: str, last: str, user: str) -> str:
    if last.startswith("Observation:"):
        return ("Thought: I can answer without using any more tools.\n"
                f"Answer: The result is {last.removeprefix('Observation:').strip()}.")
    names = re.search(r"\(one of ([^)]*)\)", system)
    tool = (names.group(1).split(",")[0].strip() if names else "multiply")
    nums = [int(float(n)) for n in _NUMBER.findall(user)][:2] or [1, 1]
    return ("Thought: The current language of the user is: English. I need to use a tool.\n"
            f"Action: {tool}\nAction Input: {json.dumps({'a': nums[0], 'b': nums[-1]})}")


def respond(prompt: str) -> str:
    done = turns(prompt)[:-1]  # the last turn is the open assistant header
    system = done[0][1] if done and done[0][0] == "system" else ""
    role, last = done[-1] if done else ("user", prompt)
    users = [c for r, c in done if r == "user" and not c.startswith(("<tool_response>",
                                                                       "Observation:"))]
    user = users[-1] if users else last
    result = _RESPONSE.search(last)
    if result:
        return f"The tool says {result.group(1)}.\n\nDone."
    if "Action Input:" in system:
        return _react(system, last, user)
    if "Context information is below" in user:
        context = user.split("---------------------")[1].strip().splitlines()
        fact = next(line for line in context if line.strip() and ":" not in line[:20])
        return f"According to the context, {fact.strip()}\n\nThat is all."
    tools = offered_tools(prompt)
    if tools:
        return "Let me use a tool.\n\n" + _call_for(tools, user)
    count = re.search(r"count to (\d+)", user)
    if count:
        return "\n\n".join(f"Step {i}." for i in range(1, int(count.group(1)) + 1))
    if "repeat:" in user:
        return user.split("repeat:", 1)[1].strip()
    return GREETING


def weak_draft(prompt: str) -> str:
    """The script, except that tool calls come without their arguments (schema-invalid)."""
    reply = respond(prompt)
    start = reply.find("<tool_call>")
    if start < 0:
        return reply
    data = json.loads(reply[start + len("<tool_call>"): reply.index("</tool_call>")])
    return reply[:start] + tool_call(data["name"], {})


def make_engine(target: Any = respond, draft: Any = weak_draft, **config: Any
                ) -> SpecGuardEngine:
    cfg = SpecGuardConfig(**{"k": 1, "temperature": 0.0, "max_new_tokens": 400, **config})
    return scripted_engine(target, draft, config=cfg)


# ---- sanity tests of the script itself ---------------------------------------------------------
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
