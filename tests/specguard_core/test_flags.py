"""`ModelFlags`: argparse flags generated from a pydantic model's fields, parsed back into it."""

from __future__ import annotations

import argparse
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from specguard_core.flags import ModelFlags


class Knobs(BaseModel):
    size: int = Field(3, ge=1, description="how many")
    ratio: float | None = Field(None, description="a share (50% is 0.5)")
    mode: Literal["fast", "slow"] = Field("fast", description="which way")
    name: str | None = Field(None, description="a name", json_schema_extra={"metavar": "NAME"})
    verbose: bool = Field(False, description="say more")
    cache: bool = Field(True, description="keep results")
    extra: dict[str, Any] | None = Field(None, description="anything else")


def _parser(flags: ModelFlags[Any]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=False)
    flags.add(parser)
    return parser


def test_each_field_is_a_flag_typed_from_its_annotation() -> None:
    flags = ModelFlags(Knobs)
    parser = _parser(flags)
    args = parser.parse_args(["--size", "5", "--ratio", "0.5", "--mode", "slow", "--name", "x",
                              "--verbose", "--no-cache", "--extra", '{"a": [1]}'])
    assert flags.parse(args) == Knobs(size=5, ratio=0.5, mode="slow", name="x", verbose=True,
                                      cache=False, extra={"a": [1]})
    assert flags.parse(parser.parse_args([])) == Knobs()  # nothing given: the model's defaults
    text = parser.format_help()
    assert "--mode {fast,slow}" in text and "--name NAME" in text and "--extra JSON" in text
    assert "--cache, --no-cache" in text and "(default: 3)" in text and "50% is 0.5" in text
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parser.parse_args(["--mode", "medium"])


def test_given_defaults_aliases_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    flags = ModelFlags(Knobs, fields=("size", "name"), defaults={"size": 7},
                       aliases={"name": ["--label"]}, env={"name": "KNOBS_NAME"})
    parser = _parser(flags)
    assert "--mode" not in parser.format_help() and "(default: $KNOBS_NAME" in \
        parser.format_help()
    args = parser.parse_args(["--label", "x"])
    assert flags.given(args) == {"name": "x"}
    assert flags.parse(args) == Knobs(size=7, name="x")
    monkeypatch.setenv("KNOBS_NAME", "env")
    assert flags.parse(parser.parse_args([])) == Knobs(size=7, name="env")
    assert flags.parse(parser.parse_args(["--name", "flag"])).name == "flag"


def test_a_bad_value_names_its_flag() -> None:
    flags = ModelFlags(Knobs)
    with pytest.raises(ValueError, match=r"^--size 0: Input should be greater than or equal to 1$"):
        flags.parse(_parser(flags).parse_args(["--size", "0"]))


def test_a_setting_for_no_field_or_a_type_without_a_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="not among the flags' fields: \\['sise'\\]"):
        ModelFlags(Knobs, defaults={"sise": 1})

    class Odd(BaseModel):
        pair: tuple[int, int] = Field((1, 2), description="two")

    with pytest.raises(TypeError, match="no flag type"):
        ModelFlags(Odd).add(argparse.ArgumentParser())
    parser = argparse.ArgumentParser()
    ModelFlags(Odd, types={"pair": lambda t: tuple(map(int, t.split(",")))}).add(parser)
    assert parser.parse_args(["--pair", "3,4"]).pair == (3, 4)
