"""Looking for a model's files on this machine never touches the network: counting tokens with
`ChatSpecGuard` and finding a served target's tokenizer read the disk only, so an uncached model
is a clear error at once, not a request to the hub first (and a hang where the network is slow).

Each case runs in a fresh interpreter (the hub client caches what it fetched per process) with
empty caches, the hub's offline switches off, and every socket connection refused and recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from specguard_core.testing import build_tokenizer

ROOT = Path(__file__).resolve().parents[2]

TRAP = """
import json, socket, sys
attempts = []

def refuse(*args, **kwargs):
    attempts.append(repr(args[0]))
    raise OSError("network refused by the test")

def refuse_connect(self, address, *args):
    return refuse(address)

socket.getaddrinfo = refuse
socket.socket.connect = refuse_connect
socket.socket.connect_ex = refuse_connect
try:
    value = run()
    out = {"value": value}
except Exception as err:
    out = {"error": type(err).__name__, "message": str(err)}
out["attempts"] = attempts
print("RESULT " + json.dumps(out))
"""


def _offline_run(body: str, home: Path) -> dict[str, Any]:
    """Run `body` (it defines `run()`) in a fresh interpreter whose model caches are under the
    empty `home`; the outcome and the network attempts it made."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                        "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_OFFLINE")}
    env.update(HF_HOME=str(home / "hf"), SPECGUARD_CACHE=str(home / "specguard"),
               XDG_CACHE_HOME=str(home / "xdg"), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", body + TRAP], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


def _hub_snapshot(home: Path, repo: str) -> Any:
    """A tokenizer in Hugging Face's cache layout, as a download of hub id `repo` leaves it."""
    cache = home / "hf" / "hub" / f"models--{repo.replace('/', '--')}"
    (cache / "refs").mkdir(parents=True)
    (cache / "refs" / "main").write_text("0" * 40)
    return build_tokenizer(cache / "snapshots" / ("0" * 40))


def test_counting_tokens_of_an_uncached_pair_is_a_clear_error_without_network(
        tmp_path: Path) -> None:
    result = _offline_run("""
def run():
    from specguard_integrations.langchain import ChatSpecGuard
    return ChatSpecGuard().get_token_ids("hello")
""", tmp_path)
    assert result["error"] == "ValueError"
    assert "counts tokens with the target's own tokenizer" in result["message"]
    assert "is not available locally" in result["message"]
    assert result["attempts"] == []


def test_a_hub_id_in_the_hugging_face_cache_counts_without_network(tmp_path: Path) -> None:
    tokenizer = _hub_snapshot(tmp_path, "Org/Tiny")
    result = _offline_run("""
def run():
    from specguard_integrations.langchain import ChatSpecGuard
    return ChatSpecGuard(model="Org/Tiny", draft="Org/Tiny").get_token_ids("hello world")
""", tmp_path)
    assert result.get("value") == tokenizer("hello world", add_special_tokens=False)["input_ids"]
    assert result["attempts"] == []


def test_a_served_targets_tokenizer_is_looked_up_without_the_hub(tmp_path: Path) -> None:
    """The served name is not cached, so the draft's tokenizer is used; the only connection
    tried is the one to the server itself."""
    build_tokenizer(tmp_path / "draft")
    result = _offline_run(f"""
def run():
    from specguard_core import SpecGuardEngine
    return SpecGuardEngine.from_pretrained({str(tmp_path / "draft")!r}, "http://127.0.0.1:9/v1",
                                           target_model="Org/Uncached", device="cpu",
                                           progress=False)
""", tmp_path)
    assert result["error"] == "RemoteTargetError"
    assert result["attempts"] and all("127.0.0.1" in a for a in result["attempts"])
