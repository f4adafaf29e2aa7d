"""`load_engine`: per-model device and dtype (`draft_device`/`target_device`, `draft_dtype`/
`target_dtype` override `device`/`dtype` for one model), checked before anything loads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard_core import SpecGuardEngine
from specguard_core.models import loading


def test_a_float32_draft_beside_a_bfloat16_target_loads_and_runs(pair_dirs: tuple[Path, Path]
                                                                 ) -> None:
    draft, target = pair_dirs
    engine = SpecGuardEngine.from_pretrained(str(draft), str(target), device="cpu",
                                             dtype="float32", target_dtype="bfloat16",
                                             progress=False)
    assert engine.draft.model.dtype == torch.float32
    assert engine.target.model.dtype == torch.bfloat16
    for fallback in ("greedy", "speculative"):  # the target writes: both models run
        result = engine.generate("What is 3 + 4?", k=1, temperature=0.0, tau=math.inf,
                                 max_new_tokens=8, max_step_tokens=4, fallback=fallback)
        assert result.usage.completion_tokens == 8
        assert result.stats.draft.decoded + result.stats.draft.prefilled > 0
        assert result.stats.target.forward_calls > 0
    flipped = SpecGuardEngine.from_pretrained(str(draft), str(target), device="cpu",
                                              dtype="float32", draft_dtype="bfloat16",
                                              target_device="cpu", progress=False)
    assert (flipped.draft.model.dtype, flipped.target.model.dtype) == (torch.bfloat16,
                                                                      torch.float32)
    assert flipped.generate("Hi", k=1, temperature=0.0, tau=0.5,
                            max_new_tokens=4).usage.completion_tokens == 4


@pytest.mark.parametrize(("options", "needle"), [
    (dict(draft_dtype="float33"), "draft_dtype='float33': unknown dtype 'float33'"),
    (dict(target_dtype="bf16"), "target_dtype='bf16': unknown dtype 'bf16'; use auto"),
    (dict(target_device="gpu"), "target_device='gpu': unknown device 'gpu' (did you mean cuda?)"),
    (dict(draft_device="tpu9"), "draft_device='tpu9': unknown device"),
    (dict(dtype="float33"), "unknown dtype 'float33'"),  # the shared option keeps its message
])
def test_a_bad_value_is_a_clear_error_before_anything_loads(
        monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], needle: str) -> None:
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing may load before the options are checked")

    monkeypatch.setattr(loading, "load_model", never)
    with pytest.raises(ValueError) as err:
        loading.load_engine(SpecGuardEngine, "d", "t", device="cpu", **options)
    assert needle in str(err.value)


def test_a_draft_on_the_cpu_beside_a_target_on_the_gpu(pair_dirs: tuple[Path, Path]) -> None:
    """The request's generator lives on the draft's device: the target's sampled regeneration
    and the speculative fallback on another device must still run (GPU machines only)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    draft, target = pair_dirs
    engine = SpecGuardEngine.from_pretrained(str(draft), str(target), device="cuda",
                                             draft_device="cpu", dtype="float32", progress=False)
    assert (engine.draft.device.type, engine.target.device.type) == ("cpu", "cuda")
    for fallback in ("sample", "speculative"):
        result = engine.generate("What is 3 + 4?", k=2, temperature=0.8, top_k=20,
                                 repetition_penalty=1.2, tau=math.inf, fallback=fallback,
                                 fallback_k=2, max_new_tokens=12, max_step_tokens=4)
        assert result.usage.completion_tokens == 12
