"""The loading flags of `specguard run`, `serve` and `bench` are generated from `LoadOptions`: every
field has its flag, with the field's description as help, and the flags parse to the same
`LoadOptions` the library builds from the same values."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from specguard.cli import build_parser, main
from specguard_core import LoadOptions, SpecGuardEngine

COMMANDS = {"run": ["run", "Hi"], "serve": ["serve"], "bench": ["bench"]}
# a value for every field (quantize apart: it excludes quantization_config)
VALUES: dict[str, Any] = {
    "device": "cpu", "dtype": "float16", "draft_device": "cpu", "target_device": "cpu:0",
    "draft_dtype": "float32", "target_dtype": "bfloat16", "device_map": {"": "cpu"},
    "max_memory": {"0": "1GiB", "cpu": "8GiB"}, "revision": "v2", "trust_remote_code": True,
    "quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True},
    "target_url": "http://127.0.0.1:9/v1", "target_model": "big", "target_tokenizer": "/tok",
    "target_timeout": 5.5, "target_api_key": "k", "target_top_logprobs": 7,
}


def _argv(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        else:
            out += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return out


def _subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[command]
    return parser


def _load(command: str, args: argparse.Namespace) -> LoadOptions:
    if command == "bench":
        from specguard_bench.cli.handlers import load_options
    else:
        from specguard.cli.run import load_options
    return load_options(args)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_load_option_has_a_flag_with_its_description(command: str) -> None:
    helps = {s: a.help for a in _subparser(command)._actions for s in a.option_strings}
    for name, info in LoadOptions.model_fields.items():
        flag = "--" + name.replace("_", "-")
        assert flag in helps, f"`specguard {command}` has no {flag}"
        assert info.description and (helps[flag] or "").startswith(info.description)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("values", [VALUES, {**{k: v for k, v in VALUES.items()
                                               if k != "quantization_config"}, "quantize": "4bit"},
                                    {"device": "cpu", "dtype": "float32"}])
def test_the_flags_parse_to_the_librarys_load_options(command: str, values: dict[str, Any]
                                                      ) -> None:
    args = build_parser().parse_args([*COMMANDS[command], *_argv(values)])
    assert _load(command, args) == LoadOptions(**values)


def test_a_new_load_option_would_get_a_flag_in_every_command() -> None:
    """The flags come from the fields at parser-building time (one source, no list to edit)."""
    from specguard_core.models.options import LoadFlags

    assert LoadFlags().fields == tuple(LoadOptions.model_fields)


def test_run_passes_the_parsed_options_to_the_loader(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[dict[str, Any]] = []

    def fake(cls: type, draft: str, target: str, **kwargs: Any) -> Any:
        seen.append({"draft": draft, "target": target, **kwargs})
        raise ValueError("stop here")

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    values = {k: v for k, v in VALUES.items() if not k.startswith("target_")}
    assert main(["run", "Hi", "--draft", "d", "--target", "t", *_argv(values)]) == 2
    assert "stop here" in capsys.readouterr().err
    assert seen[0]["load"] == LoadOptions(**values) and seen[0]["target"] == "t"


@pytest.mark.parametrize(("argv", "line"), [
    (["--draft-dtype", "bf16"], "argument --draft-dtype: invalid choice: 'bf16'"),
    (["--max-memory", "20GiB"], "argument --max-memory: not valid JSON"),
    (["--max-memory", "[1]"], 'argument --max-memory: expected a JSON object like {"key": '),
    (["--target-device", "gpu"], "error: --target-device 'gpu': unknown device 'gpu' (did you "
                                 "mean cuda?); use auto, cpu, cuda or cuda:N\n"),
    (["--target-url", "localhost:8000"], "error: --target-url 'localhost:8000': "
                                         "'localhost:8000' is not a URL"),
    (["--quantize", "4bit", "--quantization-config", "{}"],
     "error: pass quantize or quantization_config, not both\n"),
    (["--target-url", "http://h:1/v1", "--target-timeout", "0"],
     "error: --target-timeout 0.0: Input should be greater than 0"),
    (["--target-tokenizer", "/t"], "error: --target-tokenizer needs --target-url"),
])
def test_a_bad_loading_flag_is_one_error_line(argv: list[str], line: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["run", "Hi", "--draft", "./nope", "--target", "./nope", *argv])
    except SystemExit as done:  # argparse's own usage errors
        code = int(str(done.code))
    err = capsys.readouterr().err
    assert code == 2 and line in err.strip().splitlines()[-1] + "\n" and "Traceback" not in err
    assert sum("error: " in text for text in err.splitlines()) == 1  # after argparse's usage


def test_the_target_api_key_defaults_to_its_environment_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGUARD_TARGET_API_KEY", "from-env")
    args = build_parser().parse_args(["run", "Hi", "--target-url", "http://h:1/v1"])
    assert _load("run", args).served()["target_api_key"] == "from-env"
    args = build_parser().parse_args(["run", "Hi", "--target-url", "http://h:1/v1",
                                      "--target-api-key", "given"])
    assert _load("run", args).served()["target_api_key"] == "given"


def test_the_configuration_page_lists_every_load_option_with_its_flag() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    for name in LoadOptions.model_fields:
        flag = "--" + name.replace("_", "-")
        assert any(f"`{name}`" in row and f"`{flag}" in row for row in rows), name
