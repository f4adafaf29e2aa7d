"""`specguard models list|fetch` over a local cache (no network)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from specguard.cli.models import add_models_parser
from specguard_core.models import registry as models
from tests.fixtures import fake_converter


def test_cli_list_and_fetch_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cache"
    bundle = models.REGISTRY["smollm2-135m-instruct"]
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    fake_converter(gguf, models.hf_path(bundle, "bfloat16", root), "bfloat16")
    parser = argparse.ArgumentParser()
    add_models_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "--cache-dir", str(root), "list"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "smollm2-135m-instruct-bfloat16" in text and "not cached" in text
    args = parser.parse_args(
        ["models", "--cache-dir", str(root), "fetch", "smollm2", "--no-progress"]
    )
    assert args.func(args) == 0  # already converted: no download
    assert str(models.hf_path(bundle, "bfloat16", root)) in capsys.readouterr().out
    args = parser.parse_args(["models", "--cache-dir", str(root), "fetch", "nope"])
    with pytest.raises(ValueError, match="unknown model 'nope'; known: "):
        args.func(args)
