"""`benchmarks/gpu/wheels.txt` keeps up with the package: every dependency the engine declares is
either on the GPU machine already, pinned among the wheels `run.sh` installs, or named as not
needed there (its header says which and why)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what a lent GPU machine has (torch's and transformers' stack: wheels.txt's header)
ON_THE_MACHINE = {"torch", "transformers", "accelerate", "tokenizers", "safetensors", "numpy",
                  "packaging", "pyyaml", "jinja2", "tqdm", "huggingface-hub", "httpx"}
NOT_NEEDED = {"gguf", "rich"}  # `specguard models fetch`, the command line's printing


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    """The package's own dependencies (pyproject.toml's `dependencies`, without extras)."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block is not None
    return {_name(r) for r in re.findall(r'"([^"]+)"', block.group(1))}


def pinned() -> dict[str, str]:
    """wheels.txt's pins: name -> version."""
    lines = (ROOT / "benchmarks" / "gpu" / "wheels.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line.strip() and not line.startswith("#")]
    assert all(len(p) == 2 for p in pins), "wheels.txt pins exact versions: NAME==VERSION"
    return {_name(name): version for name, version in pins}


def test_every_dependency_is_on_the_machine_pinned_or_not_needed() -> None:
    deps = declared()
    assert {"torch", "pydantic", "platformdirs", "llguidance"} <= deps  # the parse sees them
    missing = deps - ON_THE_MACHINE - NOT_NEEDED - set(pinned())
    assert not missing, f"add to benchmarks/gpu/wheels.txt (pinned) or say why not: {missing}"
    assert not (set(pinned()) & ON_THE_MACHINE), "a wheel would replace the machine's own"

