"""JSON mode as a guarantee, patterns in schemas and vLLM's structured_outputs, through a live
server with the `openai` SDK and LangChain's `ChatOpenAI`.

Both scripted models talk before they answer ("Let me think ...", then the JSON), as the default
pair did under `json_object`: whatever comes back as JSON is the grammar's doing, and the
same request on the check-only path (`specguard.response_format_mode="check"`) comes back as the
prose."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core import SpecGuardConfig  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import error_of, live_server, post_chat  # noqa: E402

MODEL = "specguard-scripted"
TRIP = '{"city": "Paris", "days": 2}'
PROSE = "Let me think about the trip.\n\nParis, for 2 days.\n\n" + TRIP
CALLS = {"book_flight": {"code": "CDG"}, "Trip": {"city": "Paris", "days": 2}}
CHECK = {"specguard": {"response_format_mode": "check"}}


def responder(prompt: str) -> str:
    """Prose before every answer; a call of the offered tool (book_flight or Trip) when tools
    are offered; a flight code when the format names a Flight."""
    name = next((n for n in CALLS if f'"{n}"' in prompt), None)
    if "<tools>" in prompt and name is not None:
        call = json.dumps({"name": name, "arguments": CALLS[name]})
        return f"I will call a tool.\n<tool_call>\n{call}\n</tool_call>"
    if '"Flight"' in prompt:
        return 'The code is CDG.\n\n{"code": "CDG"}'
    return PROSE


class Trip(BaseModel):
    city: str
    days: int


class Flight(BaseModel):
    code: str = Field(pattern="^[A-Z]{3}$", description="an airport code")


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    engine = scripted_engine(responder, config=SpecGuardConfig(k=1, temperature=0.0,
                                                               max_new_tokens=200))
    with live_server(create_app(engine)) as url:
        yield f"{url}/v1"


@pytest.fixture
def client(base: str) -> Any:
    return openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)


def schema_format(strict: bool | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "Trip", "schema": Trip.model_json_schema()}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


@pytest.mark.parametrize("fmt", [{"type": "json_object"}, schema_format(None),
                                 schema_format(False), schema_format(True)])
def test_every_response_format_gets_json_from_a_talkative_pair(client: Any,
                                                               fmt: dict[str, Any]) -> None:
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "Plan a trip."}],
           "response_format": fmt}
    out = client.chat.completions.create(**ask)
    assert json.loads(out.choices[0].message.content) == {"city": "Paris", "days": 2}
    assert out.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(**ask, stream=True) if c.choices)
    assert json.loads(streamed) == {"city": "Paris", "days": 2}
    if fmt["type"] == "json_schema" and fmt["json_schema"].get("strict"):
        return  # strict is constrained on the check-only path too
    checked = client.chat.completions.create(**ask, extra_body=CHECK)
    assert checked.choices[0].message.content == PROSE  # checked, not constrained


def test_sdk_parse_with_a_pattern(client: Any) -> None:
    out = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Which airport?"}],
        response_format=Flight)
    assert out.choices[0].message.parsed == Flight(code="CDG")


def test_a_tool_with_a_pattern_through_chat_openai(base: str) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool(args_schema=Flight)
    def book_flight(code: str) -> str:
        """Book a flight to an airport."""
        return f"booked {code}"

    llm = langchain_openai.ChatOpenAI(model=MODEL, base_url=base, api_key="none", max_retries=0)
    message = llm.bind_tools([book_flight]).invoke("Book me a flight to Paris.")
    assert [(c["name"], c["args"]) for c in message.tool_calls] == \
        [("book_flight", {"code": "CDG"})]


@pytest.mark.parametrize(("method", "strict"), [("json_mode", None), ("json_schema", None),
                                                ("json_schema", True),
                                                ("function_calling", None)])
def test_chat_openai_structured_output_in_every_mode(base: str, method: str,
                                                     strict: bool | None) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(model=MODEL, base_url=base, api_key="none", max_retries=0)
    schema: Any = Trip if method != "json_mode" else None
    kwargs = {"strict": strict} if strict is not None else {}
    out = llm.with_structured_output(schema, method=method, **kwargs).invoke(  # type: ignore[arg-type]
        "Plan a trip as JSON.")
    assert out in (Trip(city="Paris", days=2), {"city": "Paris", "days": 2})


@pytest.mark.parametrize(("structured", "allowed"), [
    ({"choice": ["Rome", "Paris"]}, {"Rome", "Paris"}),
    ({"regex": "Paris, for \\d days\\."}, {"Paris, for 2 days."}),
    ({"json": Trip.model_json_schema()}, {TRIP}),
    ({"json": json.dumps(Trip.model_json_schema())}, {TRIP}),
    ({"grammar": 'root ::= "Paris" | "Oslo"'}, {"Paris", "Oslo"}),
    ({"grammar": 'start: CITY\nCITY: "Paris" | "Oslo"'}, {"Paris", "Oslo"}),
])
def test_vllm_structured_outputs(client: Any, structured: dict[str, Any],
                                 allowed: set[str]) -> None:
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Where to?"}],
        extra_body={"structured_outputs": structured})
    assert out.choices[0].message.content in allowed
    assert out.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(("fields", "words"), [
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "exactly one"),
    ({"structured_outputs": {"typo": "a"}}, "exactly one"),
    ({"structured_outputs": {"regex": "a", "disable_any_whitespace": True}}, "default only"),
    ({"structured_outputs": {"choice": ["a"]}, "response_format": {"type": "json_object"}},
     "send one of them"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs takes"),
    ({"structured_outputs": {"regex": "(?=a)a"}}, "refused structured_outputs"),  # not repeated
    ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs"),
])
def test_bad_structured_outputs_are_400s_that_say_why(base: str, fields: dict[str, Any],
                                                      words: str) -> None:
    err = error_of(post_chat(base.removesuffix("/v1"), model=MODEL, **fields), 400)
    assert err["param"] == "structured_outputs" and words in err["message"], err
