"""The three doors a `tool_choice` comes in by agree on every form: the engine itself, the
LangChain adapter (`bind_tools`) and the OpenAI-compatible server (which takes OpenAI's forms
only). Each door's choice is what the engine is handed, read by the engine's own parser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("langchain_core")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from specguard_core.text.chat import InputError, check_tools, required_tool  # noqa: E402
from specguard_integrations.langchain import ChatSpecGuard  # noqa: E402
from tests.reliability.reliability_helpers import WEATHER  # noqa: E402
from tests.specguard.serve.serve_helpers import error_of, live_server, post_chat  # noqa: E402

TIME = {"type": "function", "function": {"name": "get_time", "parameters": None}}
AUTO_TOOL = {"type": "function", "function": {"name": "auto", "parameters": None}}
TOOLS = [WEATHER, TIME, AUTO_TOOL]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
OPENAI_ONLY = "tool_choice must be 'none', 'auto', 'required' or {'type': 'function'"

# form, what the engine requires of the offered tools ("*": any call; None: no call), and
# whether it is one of OpenAI's forms (which the server takes)
FORMS: list[tuple[Any, str | None, bool]] = [
    (None, None, True),
    ("auto", None, True),
    ("none", None, True),
    ("required", "*", True),
    ("any", "*", False),
    (True, "*", False),
    (False, None, False),
    ("get_time", "get_time", False),
    ({"type": "function", "function": {"name": "get_time"}}, "get_time", True),
    ({"type": "function", "function": {"name": "auto"}}, "auto", True),
    ({"type": "function", "name": "get_time"}, "get_time", False),
    ({"type": "tool", "name": "get_time"}, "get_time", False),
    ({"name": "get_time"}, "get_time", False),
    ({"function": {"name": "get_time"}}, "get_time", False),
    ({"type": "auto"}, None, False),
    ({"type": "none"}, None, False),
    ({"type": "required"}, "*", False),
    ({"type": "any"}, "*", False),
]
# refused by every door
BAD_FORMS: list[Any] = [
    "", {"type": "function"}, {"type": "function", "function": {"name": ""}},
    {"type": "allowed_tools", "tools": []}, {"type": "tool", "name": 7}, 3.5, ["auto"],
    "nope", {"type": "function", "function": {"name": "nope"}}, {"type": "tool", "name": "nope"},
]


def script(prompt: str) -> str:
    return CALL if "<tools>" in prompt else "No tools offered.\n\nDone."


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(script)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    with live_server(create_app(engine)) as url:
        yield url


@pytest.fixture
def handed(engine: SpecGuardEngine, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The `tool_choice` of every `engine.stream` call from now on (the call still runs)."""
    seen: list[Any] = []
    real_stream = engine.stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("tool_choice", "auto"))
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(engine, "stream", spy)
    return seen


def through_langchain(engine: SpecGuardEngine, choice: Any) -> None:
    ChatSpecGuard(engine=engine, temperature=0).bind_tools(TOOLS, tool_choice=choice).invoke("hi")


def through_server(base: str, choice: Any) -> httpx.Response:
    return post_chat(base, tools=TOOLS, tool_choice=choice)


@pytest.mark.parametrize(("choice", "requires", "openai"), FORMS)
def test_the_doors_agree_on_each_form(engine: SpecGuardEngine, base: str, handed: list[Any],
                                      choice: Any, requires: str | None, openai: bool) -> None:
    tools = check_tools(TOOLS)
    assert required_tool(choice, tools) == requires  # the engine's own door
    through_langchain(engine, choice)
    r = through_server(base, choice)
    if openai:
        assert r.status_code == 200, r.text
        assert [required_tool(c, tools) for c in handed] == [requires, requires]
    else:
        err = error_of(r, 400)
        assert err["param"] == "tool_choice" and OPENAI_ONLY in err["message"]
        assert [required_tool(c, tools) for c in handed] == [requires]


@pytest.mark.parametrize("choice", BAD_FORMS)
def test_every_door_refuses_a_bad_form(engine: SpecGuardEngine, base: str, handed: list[Any],
                                       choice: Any) -> None:
    with pytest.raises(InputError, match="tool_choice"):
        required_tool(choice, check_tools(TOOLS))
    with pytest.raises(ValueError, match="tool_choice"):
        through_langchain(engine, choice)
    assert handed == []  # refused when bound, before any generation
    err = error_of(through_server(base, choice), 400)
    assert err["param"] == "tool_choice" and "nope" not in err["message"]


@pytest.mark.parametrize("choice", ["none", {"type": "none"}])
def test_none_offers_no_tools_whatever_its_form(engine: SpecGuardEngine, choice: Any) -> None:
    result = engine.generate("hi", tools=TOOLS, tool_choice=choice)
    assert result.text == "No tools offered.\n\nDone." and not result.tool_calls
