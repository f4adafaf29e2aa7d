"""Command-line flags generated from a pydantic model's fields, and the parsed flags turned back
into the model (or into overrides of it).

`ModelFlags(Model)` adds one flag per field: `name` -> `--kebab-name`, the help is the field's
`description`, the type comes from the annotation (int, float, str; a `Literal` is a choice; a
dict, or `Any`, is a JSON value; a bool is `--flag` when it defaults to False, `--flag/--no-flag`
otherwise). A field's `json_schema_extra={"metavar": ...}` names its value in the help. Every flag
defaults to None on the namespace, so what was given on the command line is known (`given`);
the command's own defaults (`defaults=`, or an environment variable: `env=`) fill the rest.
`error_line` is how every command prints an error. Importing this module loads no torch.
"""

from __future__ import annotations

import argparse
import json
import os
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError

M = TypeVar("M", bound=BaseModel)


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def error_line(err: BaseException) -> str:
    """An error as the commands print it after "error: ", on one line: pydantic's validation
    report (several lines, a documentation URL), whether raised or wrapped in a ValueError's
    message, becomes "field: problem (got value)"; any other line breaks become spaces."""
    cause = err if isinstance(err, ValidationError) else err.__context__
    text = str(err)
    if isinstance(cause, ValidationError) and (cause is err or str(cause) in text):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
            + (f" (got {e['input']!r:.60})" if e["type"] != "missing" and "input" in e else "")
            for e in cause.errors())
        prefix = text[:text.index(str(cause))] if cause is not err and str(cause) in text else ""
        return f"{prefix}{problems}"
    return " ".join(text.split()) if "\n" in text else text


def _json(kind: str) -> Callable[[str], Any]:
    """An argparse `type` reading a JSON value (`object`: a JSON object only; `object-or-text`:
    a JSON object when the text starts with `{`, else the text itself)."""
    def parse(text: str) -> Any:
        if kind == "object-or-text" and not text.lstrip().startswith("{"):
            return text
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text!r}") from None
        if kind != "any" and not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f'expected a JSON object like {{"key": "value"}}, '
                                             f"got {text!r}")
        return value

    parse.__name__ = "JSON"  # argparse names the type in its own errors
    return parse


def _kind(annotation: Any) -> tuple[str, Any]:
    """(what the flag takes, its detail): ("bool", None), ("choice", values), ("json", kind) or
    ("scalar", int | float | str). None in a union only means "unset"."""
    if annotation is Any:
        return "json", "any"
    if get_origin(annotation) in (Union, types.UnionType):
        parts = [a for a in get_args(annotation) if a is not type(None)]
        if len(parts) == 1:
            return _kind(parts[0])
        if str in parts and any(get_origin(p) is dict or p is dict for p in parts):
            return "json", "object-or-text"
        raise TypeError(f"no flag type for the union {annotation}")
    if get_origin(annotation) is Literal:
        return "choice", get_args(annotation)
    if annotation is dict or get_origin(annotation) is dict:
        return "json", "object"
    if annotation is bool:
        return "bool", None
    if annotation is SecretStr:
        return "scalar", str
    if annotation in (int, float, str):
        return "scalar", annotation
    raise TypeError(f"no flag type for {annotation}; pass ModelFlags(types={{...}})")


class ModelFlags(Generic[M]):
    """The flags of `model`'s fields (all, or `fields`). `defaults`: the command's default of a
    field where it differs from the model's (shown in the help; `default_help` describes one in
    words); `env`: a field's default read from an environment variable when parsing; `aliases`:
    further flag names of a field; `types`: an argparse `type` for a field the annotation does
    not cover (e.g. `str` for a model read from a file later; `metavars` names its value)."""

    def __init__(self, model: type[M], *, fields: Sequence[str] | None = None,
                 defaults: Mapping[str, Any] | None = None,
                 default_help: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None,
                 aliases: Mapping[str, Sequence[str]] | None = None,
                 types: Mapping[str, Callable[[str], Any]] | None = None,
                 metavars: Mapping[str, str] | None = None) -> None:
        self.model = model
        self.fields = tuple(fields or model.model_fields)
        self.defaults, self.default_help = dict(defaults or {}), dict(default_help or {})
        self.env, self.aliases, self.types = dict(env or {}), dict(aliases or {}), dict(types or {})
        self.metavars = dict(metavars or {})
        unknown = {*self.defaults, *self.default_help, *self.env, *self.aliases, *self.types,
                   *self.metavars} - set(self.fields)
        if unknown:
            raise ValueError(f"not among the flags' fields: {sorted(unknown)}")

    def add(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup,
            fields: Iterable[str] | None = None) -> None:
        """Add the flags of `fields` (default: all of this set's) to `parser` or a group."""
        for name in fields or self.fields:
            self._add(parser, name)

    def _add(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup, name: str) -> None:
        info = self.model.model_fields[name]
        names = [flag_name(name), *self.aliases.get(name, ())]
        help_text = (info.description or "").replace("%", "%%")
        default = self.defaults.get(name, info.default)
        shown = self.default_help.get(name) or (
            f"${self.env[name]}, else {'none' if default is None else default}"
            if name in self.env else
            None if default is None or isinstance(default, bool) else str(default))
        if shown:
            help_text += f" (default: {shown})".replace("%", "%%")
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kw: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
        if metavar := self.metavars.get(name, extra.get("metavar")):
            kw["metavar"] = metavar
        kind, detail = ("custom", self.types[name]) if name in self.types else \
            _kind(info.annotation)
        detail = cast(Any, detail)
        if kind == "bool":
            action = "store_true" if default is False else argparse.BooleanOptionalAction
            parser.add_argument(*names, action=action, **kw)
            return
        if kind == "choice":
            kw.update(choices=list(detail), type=type(detail[0]))
        elif kind == "json":
            kw.update(type=_json(detail))
            kw.setdefault("metavar", "JSON")
        else:
            kw.update(type=detail)
        parser.add_argument(*names, **kw)

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        """The fields given on the command line, by name."""
        return {n: v for n in self.fields if (v := getattr(args, n, None)) is not None}

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The command's defaults (and environment defaults), with what was given over them."""
        base = {**self.defaults, **{n: os.environ[var] for n, var in self.env.items()
                                    if os.environ.get(var)}}
        return {**base, **self.given(args)}

    def parse(self, args: argparse.Namespace) -> M:
        """The model of the parsed flags; a bad value is a ValueError naming its flag."""
        try:
            return self.model(**self.values(args))
        except ValidationError as err:
            problem = "; ".join(self._problem(e) for e in err.errors())
        raise ValueError(problem)  # outside the except: the line is already the whole message

    def _problem(self, error: Any) -> str:
        msg = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:
            return msg
        name = str(error["loc"][0])
        return f"{flag_name(name)} {error.get('input')!r}: {msg}"
