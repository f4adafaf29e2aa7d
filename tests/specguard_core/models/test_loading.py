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
from specguard_core.models.options import LoadOptions


def test_a_float32_draft_beside_a_bfloat16_target_loads_and_runs(pair_dirs: tuple[Path, Path]
                                                                 ) -> None:
    draft, target = pair_dirs
    engine = SpecGuardEngine.from_pretrained(str(draft), str(target), device="cpu",
                                             dtype="float32", target_dtype="bfloat16",
                                             progress=False)
    assert engine.draft.model.dtype == torch.float32
    assert engine.target.model.dtype == torch.bfloat16
    for fallback in ("greedy", "speculative"):  # the target writes: both models run
        result = engine.generate("What is 3 + 4?", k=1, temperature=0.0, route="score", tau=math.inf,
                                 max_new_tokens=8, max_step_tokens=4, fallback=fallback)
        assert result.usage.completion_tokens == 8
        assert result.stats.draft.decoded + result.stats.draft.prefilled > 0
        assert result.stats.target.forward_calls > 0
    flipped = SpecGuardEngine.from_pretrained(str(draft), str(target), device="cpu",
                                              dtype="float32", draft_dtype="bfloat16",
                                              target_device="cpu", progress=False)
    assert (flipped.draft.model.dtype, flipped.target.model.dtype) == (torch.bfloat16,
                                                                      torch.float32)
    assert flipped.generate("Hi", k=1, temperature=0.0, route="score", tau=0.5,
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
                                 repetition_penalty=1.2, route="score", tau=math.inf, fallback=fallback,
                                 fallback_k=2, max_new_tokens=12, max_step_tokens=4)
        assert result.usage.completion_tokens == 12


def test_load_options_and_keywords_load_the_same_way(pair_dirs: tuple[Path, Path]) -> None:
    draft, target = pair_dirs
    load = LoadOptions(device="cpu", dtype="bfloat16", draft_dtype="float32")
    engine = SpecGuardEngine.from_pretrained(str(draft), str(target), load=load, progress=False)
    assert (engine.draft.model.dtype, engine.target.model.dtype) == (torch.float32,
                                                                    torch.bfloat16)
    # keywords are LoadOptions fields over `load`'s
    flipped = SpecGuardEngine.from_pretrained(str(draft), str(target), load=load,
                                              dtype="float32", draft_dtype="bfloat16",
                                              progress=False)
    assert (flipped.draft.model.dtype, flipped.target.model.dtype) == (torch.bfloat16,
                                                                      torch.float32)


def test_an_unknown_keyword_or_two_targets_are_clear_errors(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from specguard_core.remote import load as remote_load

    with pytest.raises(ValueError, match=r"unknown loader option 'devcie'; valid: \[.*'device'"):
        SpecGuardEngine.from_pretrained("d", "t", devcie="cpu")
    with pytest.raises(ValueError, match="target_model applies to a target served over HTTP"):
        SpecGuardEngine.from_pretrained("d", "t", load=LoadOptions(target_model="m"))
    with pytest.raises(ValueError, match="name two served targets"):
        SpecGuardEngine.from_pretrained("d", "http://a:1/v1",
                                        load=LoadOptions(target_url="http://b:1/v1"))
    seen: list[tuple[str, LoadOptions]] = []
    monkeypatch.setattr(remote_load, "load_remote_engine",
                        lambda cls, draft, url, *, load, **kw: seen.append((url, load)))
    SpecGuardEngine.from_pretrained("d", "t", load=LoadOptions(target_url="http://b:1/v1"),
                                    target_model="m")
    ((url, load),) = seen
    assert url == "http://b:1/v1" and load.served() == {"target_url": url, "target_model": "m"}


def test_load_options_validate_and_tell_their_model_options() -> None:
    load = LoadOptions(dtype=torch.bfloat16, max_memory={"0": "2GiB", "cpu": "8GiB"},
                       target_device="cpu", quantize="8bit")
    assert load.dtype == "bfloat16" and load.max_memory == {0: "2GiB", "cpu": "8GiB"}
    assert load.placement("target") == {"device": "cpu", "dtype": "bfloat16"}
    assert load.placement("draft") == {"device": "auto", "dtype": "bfloat16"}
    assert load.quantization().load_in_8bit
    with pytest.raises(ValueError, match=r"^target_url='x:1': 'x:1' is not a URL"):
        LoadOptions.of(target_url="x:1")
    with pytest.raises(ValueError, match="^pass quantize or quantization_config, not both$"):
        LoadOptions.of(quantize="4bit", quantization_config={"load_in_4bit": True})
    with pytest.raises(ValueError, match="unknown dtype torch.float64; use auto"):
        LoadOptions(dtype=torch.float64)


@pytest.mark.parametrize(("error", "kind", "says"), [
    ("missing", loading.ModelNotFoundError, "no model 'someone/mistyped' on the Hugging Face Hub"),
    ("gated", loading.ModelLoadError, "is gated on the Hugging Face Hub"),
    ("offline", loading.ModelLoadError, "the Hugging Face Hub cannot be reached"),
])
def test_a_model_to_download_is_checked_on_the_hub_before_transformers_retries(
        monkeypatch: pytest.MonkeyPatch, error: str, kind: type[Exception], says: str) -> None:
    """A hub id that is neither a folder nor cached is looked up once (the test answers for the
    Hub: no network); a mistyped id is a clear error at once, and transformers' download (which
    retries for about a minute without a network) never starts."""
    from types import SimpleNamespace

    import huggingface_hub
    import transformers
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    response = SimpleNamespace(headers={}, request=None)
    errors = {"missing": RepositoryNotFoundError("404", response=response),  # type: ignore[arg-type]
              "gated": GatedRepoError("403", response=response),  # type: ignore[arg-type]
              "offline": ConnectionError("Name or service not known")}

    def model_info(ref: str, **kwargs: Any) -> None:
        raise errors[error]

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("transformers was asked to download")

    monkeypatch.setattr(huggingface_hub, "model_info", model_info)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    with pytest.raises(kind, match=says):
        loading.load_model("someone/mistyped", progress=False)
