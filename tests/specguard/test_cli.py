"""`specguard run` end to end on a tiny local pair (no network)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard.cli import main


def test_run_prints_a_trace_and_summary(pair_dirs: tuple[Path, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = pair_dirs
    code = main(["run", "What is 3 + 4?", "--draft", str(draft), "--target", str(target),
                 "--dtype", "float32", "--device", "cpu", "--max-new-tokens", "12",
                 "--set", "max_step_tokens=4", "--set", "route=score", "--set", "tau=0.5"])
    out = capsys.readouterr().out
    assert code == 0
    labels = ("draft kept", "draft checked", "target +", "target regen")
    assert "#0" in out and any(label in out for label in labels)
    assert "summary" in out and "acceptance" in out and "prefilled draft" in out


def test_run_json(pair_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = pair_dirs
    assert main(["run", "Hi", "--draft", str(draft), "--target", str(target), "--dtype",
                 "float32", "--device", "cpu", "--max-new-tokens", "6", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["usage"]["completion_tokens"] == 6 and result["finish_reason"] == "length"


def test_missing_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Hi", "--draft", "./nope", "--target", "./nope"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(("device", "match"), [
    ("gpu", "unknown device 'gpu' (did you mean cuda?)"),
    ("cpu:x", "unknown device 'cpu:x'"),
    ("tpu9", "unknown device 'tpu9'"),
])
def test_bad_devices_are_one_line_errors(device: str, match: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Hi", "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_cuda_without_a_gpu_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["run", "Hi", "--device", "cuda"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert main(["run", "Hi", "--device", "cuda:3"]) == 2


def test_non_utf8_argument_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    question = b"caf\xff".decode("utf-8", "surrogateescape")  # what Python makes of such argv
    assert main(["run", question]) == 2
    err = capsys.readouterr().err
    assert err == ("error: argument 2 ('caf\\xff') is not valid UTF-8 (byte 0xff); pass UTF-8 "
                   "text (check the terminal's or file's encoding)\n")


def scripted_loader(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`from_pretrained` replaced by a scripted pair that answers "Done."; what happened, in
    order: "load", then each prompt the pair saw."""
    from specguard_core import SpecGuardEngine
    from specguard_core.testing import scripted_engine

    events: list[str] = []

    def answer(prompt: str) -> str:
        events.append(prompt)
        return "Done."

    def load(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        events.append("load")
        return scripted_engine(answer)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", load)
    return events


def stdin_of(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="latin-1"))


def test_run_reads_the_question_from_stdin_with_a_dash(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    prompts = scripted_loader(monkeypatch)
    stdin_of(monkeypatch, "Grüße: what is 2 + 2?\nOn two lines.\n".encode())
    assert main(["run", "-", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "".join(s["text"] for s in result["steps"]) == "Done."
    assert "<|im_start|>user\nGrüße: what is 2 + 2?\nOn two lines.<|im_end|>" in prompts[-1]


@pytest.mark.parametrize(("data", "line"), [
    (b"caf\xe9?\n", "error: standard input is not valid UTF-8 (byte 0xe9 at offset 3); pass "
                    "UTF-8 text\n"),
    (b"\n", "error: the prompt is empty; pass a question or a list of chat messages\n"),
])
def test_bad_stdin_is_one_error_line_before_loading(data: bytes, line: str,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    events = scripted_loader(monkeypatch)
    stdin_of(monkeypatch, data)
    assert main(["run", "-"]) == 2
    assert capsys.readouterr().err == line and events == []  # nothing loaded


def test_trust_remote_code_flag_reaches_the_loader(pair_dirs: tuple[Path, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard_core.models import loading

    seen: list[bool] = []
    original = loading.load_model

    def spy(ref: str, **kwargs: Any) -> Any:
        seen.append(kwargs["trust_remote_code"])
        return original(ref, **kwargs)

    monkeypatch.setattr(loading, "load_model", spy)
    draft, target = pair_dirs
    base = ["run", "Hi", "--draft", str(draft), "--target", str(target), "--dtype", "float32",
            "--device", "cpu", "--max-new-tokens", "2", "--json"]
    assert main(base) == 0 and seen == [False, False]
    assert main([*base, "--trust-remote-code"]) == 0 and seen[2:] == [True, True]


def test_empty_question_fails_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    # the models do not exist: the question is checked first
    assert main(["run", "  ", "--draft", "./nope", "--target", "./nope"]) == 2
    assert "the prompt is empty" in capsys.readouterr().err


def test_loader_flags_reach_the_loader(pair_dirs: tuple[Path, Path],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard_core import SpecGuardEngine

    seen: list[dict[str, object]] = []
    real = SpecGuardEngine.from_pretrained

    def spy(draft: str, target: str, **kwargs: object) -> SpecGuardEngine:
        seen.append(kwargs)
        load = kwargs["load"].merged(device_map=None, max_memory=None)
        return real(draft, target, **{**kwargs, "load": load})

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", spy)
    draft, target = pair_dirs
    base = ["run", "Hi", "--draft", str(draft), "--target", str(target), "--dtype", "float32",
            "--device", "cpu", "--max-new-tokens", "2", "--json"]
    assert main([*base, "--device-map", "cpu", "--max-memory", '{"cpu": "4GiB"}',
                 "--revision", "main"]) == 0
    assert main(base) == 0
    flagged, default = seen
    flagged, default = flagged["load"], default["load"]
    assert (flagged.device_map, flagged.max_memory, flagged.revision,
            flagged.trust_remote_code) == ("cpu", {"cpu": "4GiB"}, "main", False)
    assert default.trust_remote_code is False and default.quantization() is None


def test_per_model_dtype_flags(pair_dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from specguard_core import SpecGuardEngine

    engines: list[SpecGuardEngine] = []
    real = SpecGuardEngine.from_pretrained

    def spy(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        engines.append(real(draft, target, **kwargs))
        return engines[-1]

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", spy)
    draft, target = pair_dirs
    assert main(["run", "Hi", "--draft", str(draft), "--target", str(target), "--dtype",
                 "float32", "--target-dtype", "bfloat16", "--device", "cpu",
                 "--target-device", "cpu", "--max-new-tokens", "3", "--json"]) == 0
    (engine,) = engines
    assert engine.draft.model.dtype == torch.float32
    assert engine.target.model.dtype == torch.bfloat16
    assert main(["run", "Hi", "--draft", str(draft), "--target", str(target),
                 "--draft-device", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "--draft-device 'gpu': unknown device 'gpu' (did you mean cuda?)" in err
    assert "Traceback" not in err and len(engines) == 1  # refused before loading


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"specguard {version('specguard')}"


def test_help_is_for_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "draft model proposes each reasoning step" in out and "--version" in out
    assert "core and bench" not in out and "imports" not in out  # no notes on the code's layers


@pytest.mark.parametrize(("argv", "line"), [
    (["--set", "k=abc"], "error: --set 'k=abc': k: Input should be a valid integer, unable to "
                         "parse string as an integer (got 'abc')"),
    (["--max-new-tokens", "0"], "error: max_new_tokens: Input should be greater than or equal "
                                "to 1 (got 0)"),
])
def test_bad_config_values_are_one_error_line(argv: list[str], line: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Hi", *argv]) == 2
    assert capsys.readouterr().err == line + "\n"  # no pydantic dump, no URL


def test_a_whitespace_step_prints_a_dim_end_mark_not_markup(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.testing import scripted_engine

    engine = scripted_engine(lambda prompt: "Hello [bold]there[/bold].\n\n\n\n")
    monkeypatch.setattr(SpecGuardEngine, "from_pretrained",
                        classmethod(lambda cls, *args, **kwargs: engine))
    assert main(["run", "Hi", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "Hello [bold]there[/bold]." in out  # model text is never read as markup
    assert "(end)" in out and "[dim]" not in out and "[/]" not in out


def test_config_flags_win_over_set_and_unset_ones_keep_the_preset(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from specguard_core import SpecGuardConfig, SpecGuardEngine

    configs: list[Any] = []

    def fake(cls: type, draft: str, target: str, **kwargs: Any) -> Any:
        configs.append(kwargs["config"])
        raise ValueError("stop here")

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    assert main(["run", "Hi", "--preset", "paper", "--set", "max_new_tokens=7"]) == 2
    assert main(["run", "Hi", "--preset", "paper", "--set", "max_new_tokens=7",
                 "--max-new-tokens", "9", "--verifier", "auto"]) == 2
    (from_set, from_flags) = configs
    assert (from_set.max_new_tokens, from_set.verifier) == (7, "paper")  # the preset's verifier
    assert (from_flags.max_new_tokens, from_flags.verifier) == (9, "auto")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("max_new_tokens", "verifier"):  # the field's description is the help
        description = SpecGuardConfig.model_fields[name].description or ""
        assert f"--{name.replace('_', '-')}" in text and " ".join(description.split()) in text


def _prompts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The prompts `specguard run` sends, through a scripted pair in place of loaded models."""
    from specguard_core.engine.loop import SpecGuardEngine
    from specguard_core.testing import scripted_engine

    seen: list[str] = []
    engine = scripted_engine(lambda prompt: seen.append(prompt) or "The answer is 18.")
    monkeypatch.setattr(SpecGuardEngine, "from_pretrained",
                        classmethod(lambda cls, *args, **kwargs: engine))
    return seen


def test_the_question_from_a_file_is_the_same_request_as_the_argument(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    seen = _prompts(monkeypatch)
    asked = "What is 3 + 4?\nAnswer in one line."
    path = tmp_path / "q.txt"
    path.write_bytes(b"\xef\xbb\xbf" + asked.replace("\n", "\r\n").encode() + b"\r\n\n")
    assert main(["run", asked, "--device", "cpu", "--json"]) == 0
    argument, first = json.loads(capsys.readouterr().out), seen[0]
    seen.clear()
    assert main(["run", "--file", str(path), "--device", "cpu", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert asked in first and seen[0] == first  # the same chat, line breaks and all
    assert from_file["text"] == argument["text"]


def test_the_readme_question_runs_from_examples(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    seen = _prompts(monkeypatch)
    example = Path(__file__).resolve().parents[2] / "examples" / "janet.txt"
    assert main(["run", "-f", str(example), "--device", "cpu"]) == 0
    assert "#0" in capsys.readouterr().out
    # the question as the shell passed it in the README's former one-line command
    question = example.read_text().rstrip("\n")
    assert question.startswith("Janet's ducks lay 16 eggs per day.") and "\n" not in question
    assert "for $2 per fresh duck egg" in question and question.endswith("within \\boxed{}.")
    assert question in seen[0]


@pytest.mark.parametrize(("content", "line"), [
    (None, "error: --file {path}: no such file; give a text file holding the question"),
    (b"caf\xe9?", "error: --file {path} is not valid UTF-8 (byte 0xe9 at offset 3); save it as "
                  "UTF-8"),
    (b"\n\n", "error: the prompt is empty"),
])
def test_a_question_file_that_cannot_be_used_is_one_error_line(
        content: bytes | None, line: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.txt"
    if content is not None:
        path.write_bytes(content)
    # the models do not exist: the question is read and checked first
    assert main(["run", "-f", str(path), "--draft", "./nope", "--target", "./nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line.format(path=path)) and err.count("\n") == 1


def test_a_question_and_a_file_together_or_neither_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["run", "Hi", "-f", str(tmp_path / "q.txt")], ["run"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2
    err = capsys.readouterr().err
    assert "not allowed with argument" in err and "one of the arguments question -f/--file" in err
