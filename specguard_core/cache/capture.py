"""Attention rows for the last layers only, captured while the model runs SDPA everywhere.

`install(model)` switches the model to the `specguard_sdpa` attention function: it is plain SDPA
unless the forward call carries a `specguard_recorder=AttentionRecorder(...)` keyword (transformers
passes extra keywords down to attention functions), in which case the recorder's layers also compute
their head-averaged attention rows for the *query* positions only: `[batch, q_len, n_keys]`, never an
n x n matrix and never eager attention for the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

NAME = "specguard_sdpa"


@dataclass
class AttentionRecorder:
    """Collects `rows[layer_idx] = [batch, q_len, n_keys]` (float32, heads averaged) for one forward."""

    layers: frozenset[int]
    rows: dict[int, torch.Tensor] = field(default_factory=dict)

    def stacked(self) -> torch.Tensor:
        """`[batch, L, q_len, n_keys]`, layers oldest first."""
        return torch.stack([self.rows[i] for i in sorted(self.layers)], dim=1)


def _attention_rows(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
                    scaling: float) -> torch.Tensor:
    # query [b, h, q, d], key [b, h_kv, n, d] -> head-averaged softmax rows [b, q, n]
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    scores = (query.float() @ key.float().transpose(-1, -2)) * scaling  # [b, h, q, n]
    q_len, n = scores.shape[-2:]
    if mask is not None:
        mask = mask[..., -n:]
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool \
            else scores + mask.float()
    elif q_len > 1:  # SDPA was told is_causal: queries are the last q_len positions
        causal = torch.ones(q_len, n, dtype=torch.bool, device=scores.device).tril(n - q_len)
        scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1).mean(dim=1)


def specguard_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, attention_mask: torch.Tensor | None,
                   **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA, plus recording of attention rows for the layers a recorder asks for."""
    recorder: AttentionRecorder | None = kwargs.pop("specguard_recorder", None)
    out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)
    layer = getattr(module, "layer_idx", None)
    if recorder is not None and layer in recorder.layers:
        scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
        recorder.rows[layer] = _attention_rows(query, key, attention_mask, scaling)
    return out, None


def install(model: Any) -> None:
    """Register the capture function and SDPA's mask builder under our name (idempotent), and
    switch `model` to it. Without the mask entry, transformers has no mask for a multi-token pass
    after a non-empty cache and SDPA's `is_causal` misaligns it (catch-up prefills go wrong)."""
    AttentionInterface.register(NAME, specguard_sdpa)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(NAME)


def last_layers(model: Any, count: int) -> frozenset[int]:
    n = int(model.config.get_text_config().num_hidden_layers)
    return frozenset(range(max(0, n - count), n))
