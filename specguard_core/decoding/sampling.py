"""Token choice: the request's logits shaping and the sampling that follows it (pure tensor maths).

The order is transformers' (`GenerationMixin._get_logits_processor`), through its own logits
processors: the repetition penalty on the raw logits (greedy decoding too), then temperature,
top-k, top-p (nucleus) and min-p. Greedy (temperature 0) takes the argmax of the penalised logits;
top-k, top-p and min-p only matter when sampling, as in transformers.

The penalty needs the sequence so far (prompt and committed tokens), so it is applied by whoever
holds it (`Shaping.penalise` / `penalise_rows`); the warpers after it depend on the logits alone
(`sample_with_probs`, `nucleus_probs`, `warp_logits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
)

from specguard_core.config import SpecGuardConfig

if TYPE_CHECKING:
    from specguard_core.decoding.grammar import Grammar


@dataclass(frozen=True)
class Shaping:
    """Logits shaping beyond temperature and top-p; the defaults change nothing.

    `top_k`: keep the k most likely tokens (0: all). `min_p`: keep tokens with probability >=
    min_p * the top token's (0: all). `repetition_penalty`: CTRL's penalty on every token already
    in the sequence (prompt included), as transformers and vLLM apply it (1: none; > 1 discourages
    repeats). `presence_penalty` / `frequency_penalty`: vLLM's and OpenAI's, after the repetition
    penalty: a token's logit less `presence_penalty` if the reply holds it, less
    `frequency_penalty` times the number of times it does; the reply is the sequence from
    position `reply_start` on (the prompt is not counted, as in vLLM). `grammar`: a strict
    response format's token mask (`decoding/grammar.py`), applied after the penalties, as vLLM
    applies structured output."""

    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    grammar: Grammar | None = field(default=None, compare=False)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    reply_start: int = 0  # the position of the reply's first token in the sequences penalised

    @classmethod
    def of(cls, cfg: SpecGuardConfig, grammar: Grammar | None = None,
           reply_start: int = 0) -> Shaping:
        """The shaping a `SpecGuardConfig` asks for (with a request's grammar, if any), for
        sequences whose reply starts at `reply_start`."""
        return cls(cfg.top_k, cfg.min_p, cfg.repetition_penalty, grammar, cfg.presence_penalty,
                   cfg.frequency_penalty, reply_start)

    @property
    def counted(self) -> bool:
        """Whether the presence or frequency penalty is on (they count the reply's tokens)."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def penalised(self) -> bool:
        """Whether the logits depend on the sequence so far (a penalty or a grammar)."""
        return self.repetition_penalty != 1.0 or self.counted or self.grammar is not None

    @property
    def cuts(self) -> bool:
        """Whether some tokens may be left at -inf (top-k, min-p or a grammar)."""
        return self.top_k > 0 or self.min_p > 0 or self.grammar is not None

    def penalise(self, logits: torch.Tensor, history: torch.Tensor | None) -> torch.Tensor:
        """`logits: [N, V]`, `history: [N, L]` the ids each row's sequence holds (entries equal to V
        are padding) -> `[N, V]` penalised, then masked by the grammar (the input itself when
        neither applies)."""
        if not self.penalised or history is None:
            return logits
        if self.repetition_penalty != 1.0 and history.numel():
            process = RepetitionPenaltyLogitsProcessor(self.repetition_penalty)
            logits = process(history.to(logits.device), logits)
        if self.counted:
            logits = self._count_penalty(logits, _counts(history[:, self.reply_start:],
                                                         logits.shape[-1]))
        if self.grammar is not None:
            vocab = logits.shape[-1]
            seqs = [[t for t in row if t < vocab] for row in history.tolist()]
            logits = self.grammar.mask(logits, seqs)
        return logits

    def history(self, ids: Sequence[int], rows: int = 1, device: torch.device | None = None
                ) -> torch.Tensor | None:
        """`[rows, len(ids)]`: the same sequence for every row (None when nothing reads it)."""
        if not self.penalised:
            return None
        return torch.tensor([list(ids)], dtype=torch.long, device=device).expand(rows, -1)

    def penalise_rows(self, logits: torch.Tensor, prefix: Sequence[int], ids: Sequence[int]
                      ) -> torch.Tensor:
        """A verification pass: `logits: [R, V]`, row i predicting the token after
        `prefix + ids[:i]` -> `[R, V]`, each row penalised, then masked, for its own sequence."""
        if self.repetition_penalty != 1.0:
            rows, vocab = logits.shape
            tail = torch.full((rows - 1,), vocab, dtype=torch.long)
            given = list(ids[: rows - 1])
            tail[: len(given)] = torch.tensor(given, dtype=torch.long)
            seen = torch.arange(rows - 1)[None, :] < torch.arange(rows)[:, None]  # [R, R-1]: j < i
            history = torch.cat([torch.tensor([list(prefix)], dtype=torch.long).expand(rows, -1),
                                 torch.where(seen, tail[None, :], vocab)], dim=1)  # [R, P+R-1]
            process = RepetitionPenaltyLogitsProcessor(self.repetition_penalty)
            logits = process(history.to(logits.device), logits)
        if self.counted:
            logits = self._count_penalty(logits, self._row_counts(logits, prefix, ids))
        if self.grammar is not None:
            seqs = [list(prefix) + list(ids[:i]) for i in range(logits.shape[0])]
            logits = self.grammar.mask(logits, seqs)
        return logits


    def _row_counts(self, logits: torch.Tensor, prefix: Sequence[int], ids: Sequence[int]
                    ) -> torch.Tensor:
        """`[R, V]`: how often each token occurs in row i's reply, `prefix + ids[:i]` from
        `reply_start` on."""
        rows, vocab = logits.shape
        base = _counts(torch.tensor([list(prefix[self.reply_start:])], dtype=torch.long),
                       vocab)  # [1, V]
        given = torch.tensor(list(ids[: rows - 1]), dtype=torch.long)
        step = torch.zeros(rows, vocab + 1)
        step[torch.arange(1, len(given) + 1), given.clamp(max=vocab)] = 1.0  # row j+1 adds ids[j]
        return base + step[:, :vocab].cumsum(dim=0)  # [R, V]

    def _count_penalty(self, logits: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """vLLM's order: the frequency penalty per occurrence, then the presence penalty."""
        counts = counts.to(logits.device, logits.dtype)
        return logits - self.frequency_penalty * counts - self.presence_penalty * (counts > 0)


def _counts(history: torch.Tensor, vocab: int) -> torch.Tensor:
    """`history: [N, L]` ids (entries >= vocab are padding) -> `[N, V]` occurrences per token."""
    ids = history.long().clamp(max=vocab)
    out = torch.zeros(ids.shape[0], vocab + 1, device=ids.device)
    out.scatter_add_(1, ids, torch.ones(ids.shape, device=ids.device))
    return out[:, :vocab]


NO_SHAPING = Shaping()


def _no_ids(logits: torch.Tensor) -> Any:
    """The warpers after the penalty ignore the sequence; they still take an ids argument."""
    return torch.empty(logits.shape[0] if logits.dim() > 1 else 1, 0, dtype=torch.long)


def _top_k(scaled: torch.Tensor, shaping: Shaping) -> torch.Tensor:
    """`[..., V]` temperature-scaled logits with tokens outside the top k at -inf."""
    if shaping.top_k <= 0:
        return scaled
    return TopKLogitsWarper(shaping.top_k)(_no_ids(scaled), scaled)


def _min_p(kept: torch.Tensor, shaping: Shaping) -> torch.Tensor:
    """`[k, n]` probabilities left by top-p (unnormalised, zeros outside) with min-p applied."""
    if shaping.min_p <= 0:
        return kept
    filtered = MinPLogitsWarper(shaping.min_p)(_no_ids(kept), kept.log())
    return kept.masked_fill(filtered.isneginf(), 0.0)


def warp_logits(logits: torch.Tensor, shaping: Shaping) -> torch.Tensor:
    """`[..., V]` at temperature 1 with top-k and min-p applied (removed tokens at -inf): the
    distribution the target's typical-acceptance check judges."""
    scaled = _top_k(logits, shaping)
    if shaping.min_p <= 0:
        return scaled
    flat = scaled.reshape(-1, scaled.shape[-1])
    return MinPLogitsWarper(shaping.min_p)(_no_ids(flat), flat).reshape(scaled.shape)


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator, shortlist: int = 1024,
                  shaping: Shaping = NO_SHAPING) -> torch.Tensor:
    """`[k, V] -> [k]`: greedy when temperature is 0, else top-k / top-p / min-p sampling."""
    return sample_with_probs(logits, temperature, top_p, generator, shortlist, shaping)[0]


def sample_with_probs(logits: torch.Tensor, temperature: float, top_p: float,
                      generator: torch.Generator, shortlist: int = 1024,
                      shaping: Shaping = NO_SHAPING) -> tuple[torch.Tensor, torch.Tensor]:
    """`[k, V] -> ([k] tokens, [k] their probability under the sampling distribution)`; `logits`
    already penalised (`Shaping.penalise`).

    Sorting a 150k vocabulary costs more than a small model's decode step on a CPU, so there the
    nucleus is taken from the `shortlist` most likely tokens, with their exact probabilities; rows
    whose shortlist holds less than `top_p` of the mass fall back to the full sort (same
    distribution). On an accelerator the full sort is cheap and the check would be a host sync, so
    it always sorts.
    """
    if temperature == 0:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.ones(tokens.shape, device=logits.device)
    scaled = _top_k(logits / temperature, shaping)
    if shortlist < scaled.shape[-1] and scaled.device.type == "cpu":
        values, order = scaled.topk(shortlist, dim=-1)  # [k, K], sorted descending
        probs = (values - torch.logsumexp(scaled, dim=-1, keepdim=True)).exp()
        if bool((probs.sum(dim=-1) >= top_p).all()):
            return _nucleus(probs, order, top_p, generator, shaping)
    probs, order = torch.softmax(scaled, dim=-1).sort(dim=-1, descending=True)
    return _nucleus(probs, order, top_p, generator, shaping)


def nucleus_probs(logits: torch.Tensor, temperature: float, top_p: float,
                  shaping: Shaping = NO_SHAPING) -> torch.Tensor:
    """`[..., V] -> [..., V]`: the exact distribution `sample_with_probs` draws from (one-hot argmax
    when temperature is 0)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    probs = torch.softmax(_top_k(logits / temperature, shaping), dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    kept = _top_p(sorted_p, top_p)
    if shaping.min_p > 0:
        flat = _min_p(kept.reshape(-1, kept.shape[-1]), shaping)
        kept = flat.reshape(kept.shape)
    out = torch.zeros_like(probs).scatter(-1, order, kept)
    return out / out.sum(dim=-1, keepdim=True)


def _top_p(sorted_p: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep tokens whose preceding mass is within top_p (the smallest prefix reaching top_p)."""
    return sorted_p.masked_fill((sorted_p.cumsum(dim=-1) - sorted_p) > top_p, 0.0)


def _nucleus(sorted_p: torch.Tensor, order: torch.Tensor, top_p: float,
             generator: torch.Generator, shaping: Shaping) -> tuple[torch.Tensor, torch.Tensor]:
    kept = _min_p(_top_p(sorted_p, top_p), shaping)  # [k, n]
    # the request's generator lives on the draft's device; the target may sit on another one
    pick = torch.multinomial(kept.to(generator.device), 1, generator=generator
                             ).to(kept.device)  # [k, 1]
    prob = kept.gather(-1, pick)[:, 0] / kept.sum(dim=-1)  # [k]
    return order.gather(-1, pick).squeeze(-1), prob
