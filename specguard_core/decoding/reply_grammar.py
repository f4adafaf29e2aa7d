"""The grammar of a reply under a response format or a structured output (llguidance).

The answer a format asks for is one named grammar, `answer` (`answer_entry`): a JSON schema
(any JSON object for `json_object`), a regular expression matched whole, a choice among strings,
or a Lark / GBNF grammar as llguidance reads it. The reply's own grammar refers to it as
`@answer`:

- `reply_grammar`: what constrained decoding enforces. Without tools, an optional think block
  (thinking templates whose markers are tokens) and the answer; with tools, the answer or calls
  of the tools (`tool_grammar.calls_lark(..., answer=ANSWER)`), or only calls while one is owed.
  JSON allows free whitespace, as vLLM's default does; an object's properties come in the
  schema's order (llguidance's rule, as under vLLM's guidance backend).
- `check_grammar`: what the check-only path checks answer text against (`answer_check.py`): one
  JSON object, with the Markdown fence and the surrounding whitespace that path lets through.

Pure functions of the format and the reply's top rule; the grammars come back as llguidance's
JSON text, for `GrammarIndex.for_grammar` or a matcher of one's own.
"""

from __future__ import annotations

import json
from typing import Any

from specguard_core.decoding.tool_grammar import think_rule
from specguard_core.text.formats import ResponseFormat

ANSWER = "@answer"  # the answer's grammar, as the reply's Lark refers to it
# a Markdown fence around the JSON, with any whitespace (what the check-only path lets through)
_FENCED = ('start: /[ \\t\\r\\n]*/ ("```" "json"? /[ \\t\\r\\n]*/)? @answer /[ \\t\\r\\n]*/ '
           '("```" /[ \\t\\r\\n]*/)?')


def answer_entry(fmt: ResponseFormat) -> dict[str, Any]:
    """llguidance's grammar entry (named `answer`) for the answer `fmt` asks for. A GBNF grammar
    that does not convert is a ValueError."""
    if fmt.kind == "json":
        schema = fmt.schema if fmt.schema is not None else {"type": "object"}
        return {"name": "answer", "json_schema": schema}
    if fmt.kind == "regex":
        import llguidance

        return {"name": "answer",
                "lark_grammar": f"start: /{llguidance.regex_to_lark(fmt.source, '')}/"}
    if fmt.kind == "choice":
        return {"name": "answer",
                "lark_grammar": "start: " + " | ".join(json.dumps(c) for c in fmt.choices)}
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        lark = any_to_lark(fmt.source)
    except Exception as err:  # noqa: BLE001 - the converter raises its own kinds on bad input
        raise ValueError(f"structured_outputs.grammar is neither Lark nor GBNF as llguidance "
                         f"reads them: {str(err)[:200]}") from None
    return {"name": "answer", "lark_grammar": lark}


def reply_grammar(fmt: ResponseFormat, calls: str | None, think: tuple[str, str] | None) -> str:
    """The grammar of a reply under `fmt`: `calls` (the Lark of the tools' calls, built with
    `answer=ANSWER`) when tools are offered, else the answer after an optional think block
    (`think`: its token terms, `tool_grammar.think_terms`)."""
    top = calls
    if top is None:
        lines = [f"start: think? {ANSWER}" if think else f"start: {ANSWER}"]
        top = "\n".join([*lines, think_rule(think)] if think else lines) + "\n"
    return json.dumps({"grammars": [{"lark_grammar": top}, answer_entry(fmt)]})


def check_grammar() -> str:
    """The grammar the check-only path holds a JSON answer's text to: one JSON object, in a
    Markdown fence or not, with whitespace around it."""
    return json.dumps({"grammars": [{"lark_grammar": _FENCED},
                                    answer_entry(ResponseFormat())]})
