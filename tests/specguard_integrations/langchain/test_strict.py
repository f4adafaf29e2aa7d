"""`with_structured_output(..., strict=True)` through ChatSpecGuard: the engine constrains the
answer to the schema (tiny random models, which write no JSON of their own)."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

pytest.importorskip("langchain_core")

from langchain_core.exceptions import OutputParserException  # noqa: E402

from specguard_core import SpecGuardConfig, SpecGuardEngine  # noqa: E402
from specguard_integrations.langchain import ChatSpecGuard  # noqa: E402
from specguard_integrations.langchain.convert import response_format_for  # noqa: E402
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair  # noqa: E402


class Mood(BaseModel):
    ok: bool
    mood: Literal["calm", "glad", "odd"]


def test_strict_reaches_the_response_format() -> None:
    assert response_format_for(Mood, "json_schema", True)["json_schema"]["strict"] is True
    assert "strict" not in response_format_for(Mood, "json_schema")["json_schema"]


def test_strict_structured_output_parses(tmp_path: Any) -> None:
    engine = SpecGuardEngine(*noisy_copy_pair(tmp_path), config=SpecGuardConfig(
        k=1, temperature=0.0, max_new_tokens=80, acceptance="exact", fallback="speculative"))
    model = ChatSpecGuard(engine=engine)
    mood = model.with_structured_output(Mood, method="json_schema", strict=True).invoke(
        "Describe your mood.")
    assert isinstance(mood, Mood)
    loose = model.with_structured_output(Mood, method="json_schema")  # constrained all the same
    assert isinstance(loose.invoke("Describe your mood."), Mood)
    with pytest.raises(OutputParserException):  # checked only: the tiny pair writes no JSON
        ChatSpecGuard(engine=engine, config=engine.config.merged(
            response_format_mode="check")).with_structured_output(
            Mood, method="json_schema").invoke("Describe your mood.")


class Weather(BaseModel):
    """The weather in a city."""

    city: Literal["Paris", "Oslo"]
    unit: Literal["C", "F"]


def test_function_calling_structured_output_parses(tmp_path: Any) -> None:
    engine = SpecGuardEngine(*noisy_copy_pair(tmp_path), config=SpecGuardConfig(
        k=1, temperature=0.0, max_new_tokens=80, acceptance="exact", fallback="speculative"))
    model = ChatSpecGuard(engine=engine)  # the named tool choice is constrained, strict or not
    for strict in (None, True):
        weather = model.with_structured_output(Weather, method="function_calling",
                                               strict=strict).invoke("Weather in Paris?")
        assert isinstance(weather, Weather)
