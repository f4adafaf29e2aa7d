"""Select: the self-consistency pick among k candidates (soft medoid of their embeddings).

Embeddings come from the proposing model's own mean-pooled last hidden states ("hidden", no extra
model) or from a sentence-transformer ("sentence-transformer", optional dependency).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import torch

from specguard_core.decoding.proposal import Candidate
from specguard_core.engine.verify.signals import soft_medoid


class Selector:
    """Picks one candidate index. The sentence-transformer is loaded on first use, not here."""

    def __init__(self, mode: str = "hidden", sentence_transformer: str | None = None) -> None:
        self.mode = mode
        self.path = sentence_transformer

    @cached_property
    def _encoder(self) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ImportError("selector='sentence-transformer' needs `pip install "
                              "sentence-transformers`") from None
        return SentenceTransformer(self.path, device="cpu")

    def embed(self, candidates: list[Candidate]) -> torch.Tensor:
        """`[k, d]` embeddings of the candidates' steps."""
        if self.mode == "sentence-transformer":
            texts = [c.text or " " for c in candidates]
            return torch.as_tensor(self._encoder.encode(texts, convert_to_numpy=True))
        missing = [i for i, c in enumerate(candidates) if c.embedding is None]
        if missing:
            raise ValueError(f"candidates {missing} carry no hidden-state embedding")
        return torch.stack([c.embedding for c in candidates if c.embedding is not None])

    def select(self, candidates: list[Candidate]) -> int:
        """Index of the soft medoid. With hidden states, a candidate that ended at its first token
        (EOS, nothing fed) has no embedding and takes part only when no candidate has one."""
        pool = list(range(len(candidates)))
        if self.mode == "hidden":
            pool = [i for i in pool if candidates[i].embedding is not None] or [0]
        if len(pool) == 1:
            return pool[0]
        return pool[soft_medoid(self.embed([candidates[i] for i in pool]))]
