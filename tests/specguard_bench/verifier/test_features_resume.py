"""A feature cache is reused for the model that wrote it, also one written before fingerprints
carried a weight digest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.verifier.data import load_labelled
from specguard_bench.verifier.features import extract
from specguard_core.cache.handle import ModelHandle


def test_a_cache_from_before_the_weight_digest_resumes_and_another_model_is_refused(
        tiny_pair: tuple[Any, ...], tmp_path: Path) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    data = tmp_path / "steps.jsonl"
    data.write_text(json.dumps({"id": "a", "source": "t", "problem": "2 + 3?",
                                "steps": ["2 + 3 = 5."], "labels": [1]}) + "\n")
    sols = load_labelled(str(data), None)
    out = tmp_path / "features"
    extract(ModelHandle(d_model, d_tok), sols, out, str(data), progress=False)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["fingerprint"]["weights_sha256"]
    del meta["fingerprint"]["weights_sha256"]  # as written before digests existed
    (out / "meta.json").write_text(json.dumps(meta))
    extract(ModelHandle(d_model, d_tok), sols, out, str(data), progress=False)
    with pytest.raises(ValueError, match="features of another model"):
        extract(ModelHandle(t_model, t_tok), sols, out, str(data), progress=False)
