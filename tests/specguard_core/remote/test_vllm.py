"""Opt-in: the remote target against a real vLLM server (the CPU build in `.venv-vllm`, serving the
cached default 1.5B target; `scripts/vllm_target.sh install` makes it). Slow: the server takes about
two minutes to start. Run with

    SPECGUARD_VLLM=1 pytest -m vllm tests/specguard_core/engine/test_remote_vllm.py -s

`SPECGUARD_VLLM_LOG=path` keeps the server's log there. Each run prints its figures (wall time,
target requests) for the README.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.remote.target import RemoteTarget
from specguard_core.types import GenerationResult
from tests.fixtures import real_engine, real_pair_dirs
from tests.specguard_core.remote.vllm_helpers import VLLM_NAME, VLLM_PYTHON, real_vllm_server

REASON = ("opt-in real vLLM test: set SPECGUARD_VLLM=1, with .venv-vllm made by "
          "`scripts/vllm_target.sh install` and the default pair cached (`specguard models fetch`)")
HAVE_VLLM = (os.environ.get("SPECGUARD_VLLM") == "1" and VLLM_PYTHON.exists()
             and real_pair_dirs() is not None)
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not HAVE_VLLM, reason=REASON)]

QUESTION = ("Write a Python function that returns the square of a number, then explain it in "
            "one sentence.")
GREEDY = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=40, beta=1.0)


def _run(engine: SpecGuardEngine, label: str, **overrides: object) -> GenerationResult:
    t0 = time.perf_counter()
    result = engine.generate(QUESTION, config=GREEDY, **overrides)
    s = result.stats
    print(f"{label}: {time.perf_counter() - t0:.1f}s wall, {result.usage.completion_tokens} tokens, "
          f"target calls {s.target.forward_calls}, finish {result.finish_reason}, paths "
          f"{[st.path for st in result.steps]}, text {result.raw_text!r}")
    return result


@pytest.fixture(scope="module")
def reference() -> GenerationResult:
    """The in-process target's greedy answer (every step rejected and rewritten by the target),
    computed before the server starts."""
    return _run(real_engine(), "in-process target", tau=math.inf, fallback="greedy")


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = Path(os.environ.get("SPECGUARD_VLLM_LOG") or
               tmp_path_factory.mktemp("vllm") / "vllm.log")
    t0 = time.perf_counter()
    with real_vllm_server(log) as url:
        print(f"\nvLLM answered after {time.perf_counter() - t0:.0f}s (log: {log})")
        yield url


def test_the_remote_target_writes_the_in_process_targets_greedy_text(
        reference: GenerationResult, vllm_url: str) -> None:
    """Both fallbacks with every step rejected give the target's greedy text: the server writes
    the steps (`greedy`), or verifies the draft's tokens over prompt_logprobs (`speculative`)."""
    draft_dir, _ = real_pair_dirs() or (None, None)
    remote = SpecGuardEngine.from_pretrained(str(draft_dir), vllm_url, target_model=VLLM_NAME,
                                             device="cpu", dtype="bfloat16", config=GREEDY,
                                             progress=False)
    assert isinstance(remote.target, RemoteTarget) and remote.target.context_window == 4096
    for fallback in ("greedy", "speculative"):
        got = _run(remote, f"vLLM target, fallback={fallback}", tau=math.inf, fallback=fallback)
        assert got.raw_text == reference.raw_text
        assert got.finish_reason == reference.finish_reason
    # the balanced preset's routing: every draft step checked by one pass on the server
    got = _run(remote, "vLLM target, every step checked", tau_accept=math.inf,
               tau_reject=-math.inf, fallback="speculative")
    assert got.raw_text and {s.path for s in got.steps} <= {"target-checked", "target-verified"}
