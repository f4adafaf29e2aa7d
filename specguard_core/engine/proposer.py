"""Propose: sample k candidate next steps from the committed prefix as one batch.

Used for the draft's proposals (with attention capture for grounding) and for the target's
regeneration (k=1 greedy or k samples). The k rows share the prefix's KV cache (forked in place);
each row stops at a step boundary (`steps.step_end`), an EOS token or the token budget, and every kept
token is fed through the model, so its attention row is captured and the cache of the chosen row is
complete when it is committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from specguard_core.engine.capture import AttentionRecorder
from specguard_core.engine.handle import CacheState, ModelHandle
from specguard_core.engine.signals import sparsify_rows
from specguard_core.engine.steps import StepRules, step_end

EndReason = Literal["boundary", "eos", "budget"]


@dataclass(frozen=True)
class SampleSpec:
    """How to sample one step. `capture_layers=None` skips attention capture."""

    k: int
    temperature: float
    top_p: float
    max_tokens: int
    rules: StepRules
    capture_layers: frozenset[int] | None = None
    sparsify_threshold: float = 0.01
    hidden: bool = False
    pool_layers: tuple[int, ...] = ()  # hidden-state layers (0 = embeddings) to mean-pool per step


@dataclass
class Candidate:
    """One sampled step. `logprobs: [T]` raw (temperature-1) log-probs of `token_ids`;
    `step_rows: [L, F, F]` sparsified attention rows of the F fed tokens on step columns;
    `embedding: [d]` mean last hidden state over the fed tokens; `pooled[layer]: [d]` the mean hidden
    state of that layer over the fed tokens, for each of `SampleSpec.pool_layers`."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    end: EndReason | None = None
    n_fed: int = 0
    next_logits: torch.Tensor | None = None
    step_rows: torch.Tensor | None = None
    embedding: torch.Tensor | None = None
    pooled: dict[int, torch.Tensor] = field(default_factory=dict)


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator, shortlist: int = 1024) -> torch.Tensor:
    """`[k, V] -> [k]`: greedy when temperature is 0, else nucleus (top-p) sampling.

    Sorting a 150k vocabulary costs more than a small model's decode step on a CPU, so the nucleus
    is taken from the `shortlist` most likely tokens, with their exact probabilities; rows whose
    shortlist holds less than `top_p` of the mass fall back to the full sort (same distribution).
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / temperature
    if shortlist < scaled.shape[-1]:
        values, order = scaled.topk(shortlist, dim=-1)  # [k, K], sorted descending
        probs = (values - torch.logsumexp(scaled, dim=-1, keepdim=True)).exp()
        if bool((probs.sum(dim=-1) >= top_p).all()):
            return _nucleus(probs, order, top_p, generator)
    probs, order = torch.softmax(scaled, dim=-1).sort(dim=-1, descending=True)
    return _nucleus(probs, order, top_p, generator)


def _nucleus(sorted_p: torch.Tensor, order: torch.Tensor, top_p: float,
             generator: torch.Generator) -> torch.Tensor:
    # keep tokens whose preceding mass is within top_p (the smallest prefix reaching top_p)
    kept = sorted_p.masked_fill((sorted_p.cumsum(dim=-1) - sorted_p) > top_p, 0.0)
    pick = torch.multinomial(kept, 1, generator=generator)  # [k, 1]
    return order.gather(-1, pick).squeeze(-1)


def _advance(handle: ModelHandle, cand: Candidate, tok: int, logp: float, logits: torch.Tensor,
             spec: SampleSpec, prior: str) -> bool:
    """Add `tok` to a live candidate; return True if it must be fed through the model."""
    if tok in handle.eos_ids:
        cand.token_ids.append(tok)
        cand.logprobs.append(logp)
        cand.end, cand.next_logits = "eos", logits
        return False
    before = cand.text
    text = handle.decode(cand.token_ids + [tok])
    end = step_end(prior + text, spec.rules)
    if end is not None and end - len(prior) <= len(before) and cand.token_ids:
        cand.end, cand.next_logits = "boundary", logits  # the token opens a block after prose
        return False
    cand.token_ids.append(tok)
    cand.logprobs.append(logp)
    cand.text = text
    if end is not None:
        cand.end = "boundary"
    elif len(cand.token_ids) >= spec.max_tokens:
        cand.end = "budget"
    return True


def propose(handle: ModelHandle, state: CacheState, spec: SampleSpec,
            generator: torch.Generator, prior: str = "") -> list[Candidate]:
    """Sample `spec.k` candidate steps after `state`'s prefix; `prior` is committed text that belongs
    to this step (a forced prefix). Leaves `state` forked: call `handle.keep_row` next."""
    k, n0 = spec.k, len(state.ids)
    logits = handle.next_logits(state).unsqueeze(0).expand(k, -1)  # [k, V]
    handle.fork(state, k)
    cands = [Candidate() for _ in range(k)]
    n_layers = len(spec.capture_layers or ())
    rows = torch.zeros(k, n_layers, spec.max_tokens, spec.max_tokens)  # [k, L, T, T]
    emb_sum: torch.Tensor | None = None
    pool_sums: dict[int, torch.Tensor] = {}  # layer -> [k, d]
    for t in range(spec.max_tokens):
        tokens = sample_tokens(logits, spec.temperature, spec.top_p, generator)  # [k]
        logps = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]  # [k]
        live = [i for i, c in enumerate(cands) if c.end is None]
        fed = [i for i in live if _advance(handle, cands[i], int(tokens[i]), float(logps[i]),
                                           logits[i], spec, prior)]
        if not fed:
            break
        recorder = AttentionRecorder(spec.capture_layers) if spec.capture_layers else None
        out = handle.forward(state, tokens[:, None], hidden=spec.hidden or bool(spec.pool_layers),
                             recorder=recorder)
        logits = out.logits[:, -1]  # [k, V]
        if recorder is not None:
            att = sparsify_rows(recorder.stacked()[:, :, -1], spec.sparsify_threshold)  # [k, L, n]
            rows[:, :, t, : t + 1] = att[:, :, n0 : n0 + t + 1]
        if out.hidden is not None and spec.hidden:
            h = out.hidden[:, -1].float()  # [k, d]
            emb_sum = h * 0 if emb_sum is None else emb_sum
        fed_mask = torch.zeros(k, 1)
        fed_mask[fed] = 1.0
        for layer in spec.pool_layers:
            assert out.layers is not None
            h = out.layers[layer][:, -1].float().cpu() * fed_mask  # [k, d], rows not fed: 0
            pool_sums[layer] = h if layer not in pool_sums else pool_sums[layer] + h
        for i in fed:
            c = cands[i]
            c.n_fed += 1
            if out.hidden is not None and emb_sum is not None:
                emb_sum[i] += out.hidden[i, -1].float()
            if c.end is not None:
                c.next_logits = logits[i]
        if all(c.end is not None for c in cands):
            break
    for i, c in enumerate(cands):
        c.end = c.end or "budget"
        c.step_rows = rows[i, :, : c.n_fed, : c.n_fed] if n_layers else None
        if emb_sum is not None:
            c.embedding = emb_sum[i] / max(1, c.n_fed)
        c.pooled = {layer: sums[i] / max(1, c.n_fed) for layer, sums in pool_sums.items()}
    return cands
