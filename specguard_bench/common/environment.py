"""The machine a run's figures come from: versions, threads, CPUs, device and the source commit,
recorded in every summary, and the one-line form of it for a report's header."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specguard_bench.common.files import BenchFileError, read_json_object


def source_commit() -> str | None:
    """The git commit of the checkout this package runs from (None outside a git checkout), with
    "+dirty" when tracked files differ from it."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def machine_line(env: Mapping[str, Any]) -> str:
    """The machine a run's figures come from, for a report's header: device, threads, the CPUs
    the process may use, the commit."""
    cpus = env.get("cpus_allowed")
    pinned = f" on {cpus} of {env.get('cpu_count')} CPUs" if cpus else ""
    commit = f", commit {env['commit']}" if env.get("commit") else ""
    return (f"{env.get('device_name')} ({env.get('device')}), {env.get('torch_threads')} torch "
            f"threads{pinned}{commit}")


def environment(engine: Any = None) -> dict[str, Any]:
    """Versions and hardware for the summary (device details only when an engine is given)."""
    import torch
    import transformers

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "commit": source_commit(),
        "device": None,
        "device_name": platform.processor() or platform.machine(),
    }
    if engine is not None and getattr(engine.draft, "backend", "transformers") != "transformers":
        import llama_cpp  # the only other backend

        env.update(device="cpu", backend=engine.draft.backend, llama_cpp=llama_cpp.__version__,
                   draft_dtype="gguf", target_dtype="gguf", llama_threads=engine.draft.ctx.threads)
    elif engine is not None:
        target = getattr(engine.target, "model", None)  # None: a target on a vLLM server
        device = next((target if target is not None else engine.draft.model).parameters()).device
        if device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(device)
        env["device"] = str(device)
        env["draft_dtype"] = str(next(engine.draft.model.parameters()).dtype)
        env["target_dtype"] = (str(next(target.parameters()).dtype) if target is not None
                               else f"served by {engine.target.name}")
    return env


def previous_environment(summary: Path, device: str | None = None) -> dict[str, Any]:
    """The environment recorded in the summary JSON `summary` by the last run in its directory
    (for a run where nothing ran this time); this machine's, with `device` when given, if that run
    was stopped before it wrote a summary."""
    if summary.exists():
        env = read_json_object(summary).get("environment", {})
        if not isinstance(env, dict):
            raise BenchFileError(f"{summary}: its 'environment' is a JSON "
                                 f"{type(env).__name__}, not an object; delete the file")
        return dict(env)
    env = environment()
    if device is not None:
        env["device"] = device
    return env
