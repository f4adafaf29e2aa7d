"""`specguard serve`: flags reach the server, a port in use or an address not ours fails fast and
plainly, a missing extra says what to install, and the CLI parser never imports the web stack."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from specguard.cli import main  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import ANSWER, reply, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_port_in_use_exits_nonzero_without_traceback() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "specguard", "serve", "--port", str(port)],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: the port is already in use" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("argv", "needle"), [
    (["--host", "192.0.2.1", "--port", "8000"], "192.0.2.1 is not an address of this machine"),
    (["--port", "70000"], "is not a port number"),
])
def test_address_not_allowed(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
                             ) -> None:
    assert main(["serve", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert main(["serve", "--port", "0"]) == 2
    assert "pip install -e '.[serve]'" in capsys.readouterr().err


def test_parser_does_not_import_the_web_stack() -> None:
    code = ("import sys, specguard.cli; specguard.cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'fastapi', 'uvicorn', 'starlette') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "[]"


def test_serve_runs_with_its_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_load(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        seen.update(draft=draft, target=target, **kwargs)
        return scripted_engine(reply, config=kwargs["config"])

    servers: list[Any] = []
    real_run = uvicorn.Server.run

    def capture_run(self: Any, sockets: Any = None) -> None:
        servers.append(self)
        real_run(self, sockets=sockets)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", staticmethod(fake_load))
    monkeypatch.setattr(uvicorn.Server, "run", capture_run)
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # a free port, released for the server to take
    argv = ["serve", "--draft", "d", "--target", "t", "--port", str(port), "--api-key", "k1",
            "--served-model-name", "sg", "--set", "k=1", "--set", "temperature=0",
            "--max-concurrent", "2", "--max-queue", "3", "--device", "cpu", "--log-level",
            "warning", "--target-dtype", "bfloat16", "--draft-device", "cpu", "--revision", "v1"]
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: bool(servers) and servers[0].started, timeout_s=30)
        url, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer k1"}
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401
        assert httpx.get(f"{url}/v1/models", headers=auth, timeout=5).json()["data"][0]["id"] == \
            "sg"
        health = httpx.get(f"{url}/health", timeout=5).json()
        assert (health["max_concurrent"], health["max_queue"]) == (2, 3)
        r = httpx.post(f"{url}/v1/chat/completions", headers=auth, timeout=30, json={
            "model": "sg", "messages": [{"role": "user", "content": "(3 + 4) * 6?"}]})
        assert r.json()["choices"][0]["message"]["content"] == ANSWER
    finally:
        if servers:
            servers[0].should_exit = True
        thread.join(timeout=15)
    assert result == [0]
    load = seen["load"]
    assert (seen["draft"], seen["target"], load.device) == ("d", "t", "cpu")
    assert (seen["config"].k, seen["config"].temperature) == (1, 0.0)
    # the loader flags `specguard run` has, per-model device/dtype included
    assert (load.target_dtype, load.draft_device, load.draft_dtype, load.revision) == (
        "bfloat16", "cpu", None, "v1")


def test_serve_batches_by_default_and_the_flag_builds_the_engine_with_its_slots(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, Any] = {}

    def fake_load(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        seen.update(kwargs)
        return scripted_engine(reply, config=kwargs["config"])

    def fake_app(engine: Any, settings: Any) -> Any:
        seen["settings"] = settings
        raise SystemExit(0)  # stop before uvicorn starts

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", staticmethod(fake_load))
    monkeypatch.setattr("specguard.serve.app.create_app", fake_app)
    for argv, batching, slots in ((["--batching"], True, 16), ([], True, 16),
                                  (["--no-batching"], False, 1),
                                  (["--trust-remote-code"], False, 1),
                                  (["--trust-remote-code", "--batching"], True, 16),
                                  (["--batching", "--max-concurrent", "3"], True, 3),
                                  (["--max-batch-rows", "48"], True, 16)):
        with pytest.raises(SystemExit):
            main(["serve", "--port", "0", *argv])
        cfg = seen["engine_config"]
        assert (cfg is not None and cfg.batching) == batching
        assert seen["config"].check_tokens == 16 and seen["config"].k == 1  # balanced, the default
        assert seen["settings"].max_concurrent == slots
        if batching:
            assert cfg.max_batch_rows == (48 if "--max-batch-rows" in argv else 16)
        said = capsys.readouterr().err
        assert ("note: batching off (--trust-remote-code" in said) == (argv == ["--trust-remote-code"])
    # --max-batch-rows without --batching, or below 1: a one-line error before any model loads
    seen.clear()
    assert main(["serve", "--port", "0", "--no-batching", "--max-batch-rows", "32"]) == 2
    with pytest.raises(SystemExit) as usage:  # argparse: one usage line
        main(["serve", "--port", "0", "--batching", "--max-batch-rows", "0"])
    assert usage.value.code == 2
    assert "engine_config" not in seen


def served_settings(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Any:
    """The ServeSettings `specguard serve ARGV` builds (stopped before uvicorn starts)."""
    return served(monkeypatch, argv)[0]


def served(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[Any, Any]:
    """(the ServeSettings, the engine's default request config) `specguard serve ARGV` builds."""
    seen: dict[str, Any] = {}

    def fake_app(engine: Any, settings: Any) -> Any:
        seen["settings"], seen["config"] = settings, engine.config
        raise SystemExit(0)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", staticmethod(
        lambda draft, target, **kw: scripted_engine(reply, config=kw["config"])))
    monkeypatch.setattr("specguard.serve.app.create_app", fake_app)
    with pytest.raises(SystemExit):
        main(["serve", "--port", "0", "--no-batching", *argv])
    return seen["settings"], seen["config"]


def test_the_api_key_from_a_file_or_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPECGUARD_API_KEY", raising=False)
    assert served_settings(monkeypatch, []).api_key is None
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    assert served_settings(monkeypatch, ["--api-key-file", str(key_file)]).api_key == \
        "sk-from-file"
    monkeypatch.setenv("SPECGUARD_API_KEY", "sk-from-env")
    assert served_settings(monkeypatch, []).api_key == "sk-from-env"
    assert served_settings(monkeypatch, ["--api-key-file", str(key_file)]).api_key == \
        "sk-from-file"
    key_file.write_text("\n")
    assert main(["serve", "--port", "0", "--api-key-file", str(key_file)]) == 2
    assert "is empty" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--api-key-file", str(tmp_path / "none")]) == 2
    assert "cannot read --api-key-file" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one or the other
        main(["serve", "--api-key", "a", "--api-key-file", str(key_file)])


def test_a_blank_api_key_flag_or_variable_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPECGUARD_API_KEY", raising=False)
    assert main(["serve", "--port", "0", "--api-key", "  "]) == 2
    assert "empty or blank" in capsys.readouterr().err
    monkeypatch.setenv("SPECGUARD_API_KEY", " \t")
    assert main(["serve", "--port", "0"]) == 2
    assert "empty or blank" in capsys.readouterr().err


def test_the_limits_on_requests_come_from_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    default, cfg = served(monkeypatch, [])
    assert (default.limits.max_k, default.limits.max_tokens, default.limits.verifier_dir) == \
        (8, None, None)  # no cap on max_tokens but the context window
    assert cfg.max_new_tokens is None  # an unset max_tokens: the window's remainder
    assert default.host_allow_list() == {"127.0.0.1", "localhost", "::1"}
    budget, cfg = served(monkeypatch, ["--max-new-tokens", "8192"])
    assert (cfg.max_new_tokens, budget.limits.max_tokens) == (8192, None)
    settings = served_settings(monkeypatch, [
        "--max-k", "2", "--max-tokens-cap", "1000", "--verifier-dir", str(tmp_path),
        "--allowed-host", "api.lan", "--allowed-origin", "http://ui.lan", "--max-body-bytes",
        "5000"])
    assert (settings.limits.max_k, settings.limits.max_tokens, settings.limits.verifier_dir,
            settings.limits.max_body_bytes) == (2, 1000, tmp_path, 5000)
    assert "api.lan" in settings.host_allow_list()
    assert settings.allowed_origins == ("http://ui.lan",)
    assert main(["serve", "--port", "0", "--verifier-dir", str(tmp_path / "none")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_browser_and_stream_flags(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPECGUARD_API_KEY", raising=False)
    default = served_settings(monkeypatch, [])
    assert (default.allowed_origins, default.allowed_methods, default.allowed_headers,
            default.allow_credentials) == ((), ("GET", "POST"), ("Authorization", "Content-Type"),
                                           False)
    assert (default.sse_keepalive_s, default.max_stream_buffer_bytes) == (10.0, 128 << 20)
    settings = served_settings(monkeypatch, [
        "--allowed-origins", '["http://a.lan", "http://B.lan/"]', "--allowed-origin",
        "http://c.lan", "--allowed-methods", "get, post", "--allowed-headers", '["X-Trace"]',
        "--allow-credentials", "--sse-keepalive", "2.5", "--max-stream-buffer-bytes", "9000"])
    assert settings.allowed_origins == ("http://a.lan", "http://b.lan", "http://c.lan")
    assert (settings.allowed_methods, settings.allowed_headers, settings.allow_credentials) == (
        ("GET", "POST"), ("X-Trace",), True)
    assert (settings.sse_keepalive_s, settings.max_stream_buffer_bytes) == (2.5, 9000)
    assert served_settings(monkeypatch, ["--allowed-origins", "*", "--api-key", "k"]
                           ).allowed_origins == ("*",)
    # any origin without a key, or with credentials: a one-line error before any model loads
    for argv in (["--allowed-origins", "*"], ["--allowed-origins", "*", "--api-key", "k",
                                              "--allow-credentials"],
                 ["--sse-keepalive", "-1"]):
        assert main(["serve", "--port", "0", *argv]) == 2
        said = capsys.readouterr().err
        assert said.startswith("error: ") and said.count("\n") == 1 and "Traceback" not in said
    with pytest.raises(SystemExit) as usage:  # not a JSON list of strings
        main(["serve", "--port", "0", "--allowed-origins", "[1, 2]"])
    assert usage.value.code == 2
