"""Which model a verifier card or a set of normaliser bounds belongs to: a `Fingerprint` of the
model's config, vocabulary and shape, plus a digest of its weights.

The config alone cannot tell a fine-tune from its base model (both keep the same `config.json`),
so `weights_digest` hashes a few fixed elements of every parameter:

- cheap: 64 elements per named parameter, evenly spaced over the flattened tensor and picked by
  index (no copy of a whole tensor), about 19k numbers for a 0.5B model, computed once per loaded
  model object and remembered;
- hard to miss: a full fine-tune, or a merged LoRA adapter, moves elements of every matrix it
  touches, and the digest reads every parameter;
- independent of the load dtype: each element is cast to float32, rounded to bfloat16 and values
  below 2**-14 (float16's smallest normal) are read as 0, so a bfloat16 checkpoint hashes the same
  loaded in bfloat16, float32 or float16, and a float32 checkpoint the same in float32 or bfloat16
  (float16 loads of a float32 checkpoint may differ: double rounding), on any device.

A model whose weights are not all in memory (offloaded to disk: `meta` tensors) has no digest
(None), and neither has a card or bounds file written before digests existed: the digest is
compared only when both sides have one, so those match on the rest of the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

# config keys that do not change what the hidden states mean
_VOLATILE = {"_name_or_path", "torch_dtype", "dtype", "transformers_version", "_attn_implementation",
             "_attn_implementation_autoset", "attn_implementation", "use_cache", "_commit_hash",
             "name_or_path"}
_SAMPLES = 64  # elements hashed per parameter
_TINY = 2.0**-14  # float16's smallest normal: smaller values read as 0
_DIGESTS: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


class Fingerprint(BaseModel):
    """Identifies the model a probe (or bounds) was fitted on. `name` is informational; the rest
    must match, `weights_sha256` only when both sides have one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    config_sha256: str
    vocab_size: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    weights_sha256: str | None = None  # `weights_digest` (None: not recorded)

    def mismatch(self, other: Fingerprint) -> list[str]:
        """The fields (other than `name`) in which `other` differs."""
        diff = [k for k in ("config_sha256", "vocab_size", "hidden_size", "num_layers")
                if getattr(self, k) != getattr(other, k)]
        if self.weights_sha256 and other.weights_sha256 and \
                self.weights_sha256 != other.weights_sha256:
            diff.append("weights_sha256")
        return diff


def _sample(param: torch.Tensor) -> torch.Tensor:
    """`_SAMPLES` fixed elements of `param` (all of a smaller one), as float32 values at bfloat16
    precision with tiny values read as 0, on the CPU."""
    p = param.detach()
    n = p.numel()
    k = min(n, _SAMPLES)
    flat = torch.tensor([i * (n - 1) // max(1, k - 1) for i in range(k)], device=p.device)
    picked = p.reshape(1)[flat] if p.dim() == 0 else p[torch.unravel_index(flat, p.shape)]
    values = picked.float().to(torch.bfloat16).float().cpu()
    values[values.abs() < _TINY] = 0.0  # also makes -0.0 read as 0.0
    return values


def weights_digest(model: Any) -> str | None:
    """sha256 over each named parameter's name, shape and `_sample`; None when a parameter is not
    in memory. Computed once per model object."""
    try:
        return _DIGESTS[model]
    except (KeyError, TypeError):  # TypeError: an object that takes no weak reference
        pass
    h = hashlib.sha256()
    digest: str | None = None
    with torch.no_grad():
        params = sorted(model.named_parameters(), key=lambda item: item[0])
        if all(p.device.type != "meta" for _, p in params):
            for name, p in params:
                h.update(f"{name}:{tuple(p.shape)}:".encode())
                if p.numel():
                    h.update(_sample(p).numpy().astype("<f4").tobytes())
            digest = h.hexdigest()
    try:
        _DIGESTS[model] = digest
    except TypeError:
        pass
    return digest


def fingerprint(model: Any, tokenizer: Any) -> dict[str, Any]:
    """The fingerprint of a loaded HF causal LM (as a plain dict, JSON-ready)."""
    cfg = model.config.get_text_config()
    data = {k: v for k, v in cfg.to_dict().items() if k not in _VOLATILE}
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    return Fingerprint(name=Path(name).name or name, config_sha256=digest,
                       vocab_size=len(tokenizer), hidden_size=int(cfg.hidden_size),
                       num_layers=int(cfg.num_hidden_layers),
                       weights_sha256=weights_digest(model)).model_dump()


def stamp(path: str | Path, here: Fingerprint) -> bool:
    """Record `here.weights_sha256` in the JSON file at `path` (a verifier card or a shipped bounds
    file: an object whose "model" is a fingerprint), rewriting it in place. The file must have been
    fitted on a model with `here`'s config and shape; returns False when it already holds this
    digest. Raises ValueError (one line) otherwise."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        recorded = Fingerprint.model_validate(data["model"])
    except FileNotFoundError:
        raise FileNotFoundError(f"{p} not found; pass a verifier card or bounds JSON") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{p} holds no model fingerprint ({type(err).__name__}: {err}); pass a "
                         "verifier card or a shipped bounds file") from None
    if here.weights_sha256 is None:
        raise ValueError(f"{here.name}'s weights are not all in memory (offloaded?), so they have "
                         "no digest; load it on one device (--device cpu)")
    diff = [k for k in recorded.mismatch(here) if k != "weights_sha256"]
    if diff:
        raise ValueError(f"{p} was fitted on {recorded.name}, and {here.name} differs in "
                         f"{', '.join(diff)}; stamp it with the model it was fitted on")
    if recorded.weights_sha256 == here.weights_sha256:
        return False
    if recorded.weights_sha256:
        raise ValueError(f"{p} already records other weights ({recorded.weights_sha256[:12]}...) "
                         f"than {here.name}'s ({here.weights_sha256[:12]}...); it was fitted on "
                         "another checkpoint: refit it for this one")
    data["model"] = {**data["model"], "weights_sha256": here.weights_sha256}
    p.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return True
