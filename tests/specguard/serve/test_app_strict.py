"""Strict structured output through the server: the `openai` SDK's `parse` (which sends
`json_schema.strict: true`) and LangChain's `ChatOpenAI.with_structured_output(strict=True)`
against a live server over tiny random models. Such a pair writes no JSON of its own, so a reply
that parses into the schema is the constrained decoding's doing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core import SpecGuardConfig, SpecGuardEngine  # noqa: E402
from tests.specguard.serve.serve_helpers import live_server  # noqa: E402
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair  # noqa: E402

MESSAGES = [{"role": "user", "content": "Describe your mood."}]


class Mood(BaseModel):
    ok: bool
    mood: Literal["calm", "glad", "odd"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pair = noisy_copy_pair(tmp_path_factory.mktemp("strict-serve"))
    engine = SpecGuardEngine(*pair, config=SpecGuardConfig(
        k=1, temperature=0.0, max_new_tokens=80, acceptance="exact", fallback="speculative"),
        name="tiny")
    with live_server(create_app(engine)) as url:
        yield f"{url}/v1"


def test_sdk_parse_gets_the_schemas_object(base: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
    out = client.chat.completions.parse(model="tiny", messages=MESSAGES, response_format=Mood)
    assert isinstance(out.choices[0].message.parsed, Mood)
    loose = {"type": "json_schema", "json_schema": {"name": "Mood",
                                                    "schema": Mood.model_json_schema()}}
    out = client.chat.completions.create(  # without strict: constrained all the same
        model="tiny", messages=MESSAGES, response_format=loose)  # type: ignore[arg-type]
    Mood.model_validate_json(out.choices[0].message.content or "")
    checked = client.chat.completions.create(  # the opt-out: checked only
        model="tiny", messages=MESSAGES, response_format=loose,  # type: ignore[arg-type]
        extra_body={"specguard": {"response_format_mode": "check"}})
    with pytest.raises(ValueError):
        json.loads(checked.choices[0].message.content or "")


def test_langchain_strict_structured_output(base: str) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(base_url=base, api_key="none", model="tiny",
                                      max_retries=0, timeout=60)
    mood: Any = llm.with_structured_output(Mood, method="json_schema", strict=True).invoke(
        MESSAGES[0]["content"])
    assert isinstance(mood, Mood)


def test_strict_with_tools_answers_or_calls(base: str) -> None:
    """One grammar holds both: the format's JSON, or a call of an offered tool."""
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"],
        "additionalProperties": False}}}
    out = client.chat.completions.parse(model="tiny", messages=MESSAGES, tools=[tool],  # type: ignore[list-item]
                                        response_format=Mood)
    message = out.choices[0].message
    assert isinstance(message.parsed, Mood) or [c.function.name for c in message.tool_calls or []
                                                if c.type == "function"] == ["f"]


class Weather(BaseModel):
    city: Literal["Paris", "Oslo"]
    unit: Literal["C", "F"]


def test_sdk_parse_gets_a_strict_tools_arguments(base: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
    out = client.chat.completions.parse(
        model="tiny", messages=MESSAGES, tools=[openai.pydantic_function_tool(Weather)],
        tool_choice={"type": "function", "function": {"name": "Weather"}})
    [call] = out.choices[0].message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, Weather)  # type: ignore[union-attr]
    assert out.choices[0].finish_reason == "tool_calls"


def test_required_tool_choice_gets_valid_calls(base: str) -> None:
    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
    closed = {**Weather.model_json_schema(), "additionalProperties": False}
    tool = {"type": "function", "function": {"name": "Weather", "parameters": closed}}
    out = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=[tool],
                                         tool_choice="required", parallel_tool_calls=False)
    [call] = out.choices[0].message.tool_calls or []
    assert isinstance(Weather.model_validate_json(call.function.arguments), Weather)  # type: ignore[union-attr]
