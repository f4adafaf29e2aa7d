"""`specguard run` / `specguard serve` with a target on a (fake) vLLM server: the remote flags reach
the loader, and misuse is one error line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard.cli import main
from specguard_core.engine.loop import SpecGuardEngine
from tests.specguard_core.remote.vllm_helpers import free_port, served_target


def test_run_with_a_target_url(pair_dirs: tuple[Path, Path],
                               capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = pair_dirs
    with served_target(target) as url:
        code = main(["run", "What is 3 + 4?", "--draft", str(draft), "--target-url", url,
                     "--target-model", "served", "--target-tokenizer", str(target),
                     "--target-timeout", "30", "--dtype", "float32", "--device", "cpu",
                     "--max-new-tokens", "12", "--set", "max_step_tokens=4"])
    out = capsys.readouterr().out
    assert code == 0 and "summary" in out
    passes = int(out.split("target passes ")[1].split()[0])
    assert passes > 0  # the balanced preset checks every step on the server


def test_remote_flag_misuse_is_one_error_line(pair_dirs: tuple[Path, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    draft = str(pair_dirs[0])  # a draft every machine has: the cached pair may not be fetched
    assert main(["run", "Hi", "--target-model", "m"]) == 2
    assert "--target-model needs --target-url" in capsys.readouterr().err
    url = f"http://127.0.0.1:{free_port()}/v1"
    assert main(["run", "Hi", "--draft", draft, "--target-url", url, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the target server" in err and "Traceback" not in err
    # the server places a served target: a target placement flag is refused before any call
    assert main(["run", "Hi", "--draft", draft, "--target-url", url,
                 "--target-dtype", "float32"]) == 2
    err = capsys.readouterr().err
    assert "target_dtype places an in-process target" in err and "Traceback" not in err


def test_serve_passes_the_remote_flags(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Any] = {}

    def fake_load(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        seen.update(draft=draft, target=target, **kwargs)
        raise ValueError("stop here")

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", staticmethod(fake_load))
    argv = ["serve", "--draft", "d", "--target-url", "http://10.0.0.5:8000/v1", "--target-model",
            "big", "--target-api-key", "secret", "--port", str(free_port())]
    assert main(argv) == 2 and "stop here" in capsys.readouterr().err
    load = seen["load"]
    assert (seen["draft"], load.target_url) == ("d", "http://10.0.0.5:8000/v1")
    assert load.served() == {"target_url": "http://10.0.0.5:8000/v1", "target_model": "big",
                             "target_api_key": "secret"}
