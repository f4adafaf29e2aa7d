"""Teacher-forced step features: one forward pass per labelled solution through a scoring model,
with the engine's own attention capture and signal code, cached as float16/float32 `.npz` chunks.

The prompt is the bench's (chat template over `messages_for(problem)`); the solution follows as the
steps, each tokenized on its own with the step delimiter appended (except the last), so a step's
tokens are exactly what the engine would have fed had the draft written that step after that
prefix. Signals per step come from `specguard_core.engine.verify.signals` exactly as `target_scores` and
the proposer compute them while generating: log-probs of the step tokens, attention rows of the
step's tokens sparsified over the full row and cut to the step's columns, mean hidden state of a
layer over the step's tokens (`Candidate.pooled`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specguard_bench.reasoning.problems import messages_for
from specguard_bench.verifier.data import LabelledSolution
from specguard_core.cache import capture
from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.engine.verify import signals
from specguard_core.engine.verify.cards import Fingerprint, fingerprint
from specguard_core.text.chat import render_prompt

DELIMITER = "\n\n"
CAPTURE_LAST = 6  # attention rows of the last 6 layers: the paper's 3 plus variants
PAPER_LAYERS = 3  # SpecGuardConfig().grounding_layers
SPARSIFY = 0.01  # SpecGuardConfig().sparsify_threshold
CHUNK = 20  # solutions per cached chunk (resume granularity)


def scalar_names(n_capture: int) -> list[str]:
    """Names of the per-step scalar features, in column order."""
    names = ["confidence", "grounding", "grounding_residual", "grounding_mean",
             "grounding_mean_residual", f"grounding_last{n_capture}"]
    names += [f"grounding_layer-{n_capture - i}" for i in range(n_capture)]  # oldest first
    return names + ["mean_logprob", "entropy_mean", "entropy_max", "n_tokens"]


def pool_layers_for(n_layers: int, every: int = 4) -> tuple[int, ...]:
    """Candidate hidden-state layers (0 = embeddings, as in HF `hidden_states`): every 4th and the last."""
    return tuple(sorted(set(range(0, n_layers + 1, every)) | {n_layers}))


@dataclass
class SolutionFeatures:
    """Features of one solution's labelled steps (null-labelled steps are dropped)."""

    step_index: list[int]
    labels: list[int]
    scalars: np.ndarray  # [S, n_scalar] float32
    pooled_mean: dict[int, np.ndarray]  # layer -> [S, d] float32
    pooled_last: dict[int, np.ndarray]  # layer -> [S, d] float32 (last token of the step)


def step_token_ids(handle: ModelHandle, steps: Sequence[str]) -> list[list[int]]:
    """Each step's tokens: the step text plus the delimiter (not after the last step)."""
    n = len(steps)
    return [handle.encode(s + (DELIMITER if i < n - 1 else "")) for i, s in enumerate(steps)]


def prompt_token_ids(handle: ModelHandle, problem: str) -> list[int]:
    return handle.encode(render_prompt(handle.tokenizer, messages_for(problem), []))


def step_scalars(logps: torch.Tensor, logits: torch.Tensor, step_rows: torch.Tensor) -> list[float]:
    """The scalar signals of one step. `logps: [T]`, `logits: [T, V]` predicting each step token,
    `step_rows: [L, T, T]` sparsified rows on the step's columns (L = captured layers, oldest first)."""
    paper = step_rows[-PAPER_LAYERS:]
    mean_g = signals.grounding_per_token(paper).mean() if logps.numel() else torch.tensor(1.0)
    mean_gr = (signals.grounding_per_token(paper, residual=True).mean() if logps.numel()
               else torch.tensor(1.0))
    logp_all = torch.log_softmax(logits.float(), dim=-1)  # [T, V]
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1)  # [T]
    out = [signals.confidence(logps), signals.grounding(paper), signals.grounding(paper, True),
           float(mean_g), float(mean_gr), signals.grounding(step_rows)]
    out += [signals.grounding(step_rows[i : i + 1]) for i in range(step_rows.shape[0])]
    return out + [float(logps.mean()), float(entropy.mean()), float(entropy.max()),
                  float(logps.numel())]


def teacher_force(handle: ModelHandle, sol: LabelledSolution, pool: Sequence[int],
                  n_capture: int = CAPTURE_LAST) -> SolutionFeatures:
    """One forward over the bench prompt + the steps; features of every labelled step."""
    return teacher_force_ids(handle, prompt_token_ids(handle, sol.problem),
                             step_token_ids(handle, sol.steps), sol.labels, pool, n_capture)


def teacher_force_ids(handle: ModelHandle, prompt: list[int], per_step: Sequence[list[int]],
                      labels: Sequence[int | None], pool: Sequence[int],
                      n_capture: int = CAPTURE_LAST) -> SolutionFeatures:
    """Feed `prompt` (one prefill), then every step's tokens in one pass with capture; features of
    each step whose label is not None."""
    ids = [t for s in per_step for t in s]
    state = handle.new_state()
    handle.extend(state, prompt)
    n0 = len(state.ids)
    first = handle.next_logits(state)  # [V] predicts the first step token
    layers = capture.last_layers(handle.model, n_capture)
    recorder = AttentionRecorder(layers)
    out = handle.extend(state, ids, all_logits=True, hidden=True, recorder=recorder)
    assert out is not None and out.layers is not None
    logits = torch.cat([first[None], out.logits[0, :-1]])  # [Q, V] predicting each solution token
    logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]  # [Q]
    att = signals.sparsify_rows(recorder.stacked()[0], SPARSIFY)  # [L, Q, n0 + Q]
    feats = SolutionFeatures([], [], np.zeros((0, 0), np.float32), {}, {})
    rows: list[list[float]] = []
    means: dict[int, list[np.ndarray]] = {layer: [] for layer in pool}
    lasts: dict[int, list[np.ndarray]] = {layer: [] for layer in pool}
    start = 0
    for i, step_ids in enumerate(per_step):
        s, e = start, start + len(step_ids)
        start = e
        label = labels[i]
        if label is None or e == s:
            continue
        step_rows = att[:, s:e, n0 + s : n0 + e]  # [L, T, T]
        rows.append(step_scalars(logps[s:e], logits[s:e], step_rows))
        for layer in pool:
            h = out.layers[layer][0, s:e].float()  # [T, d]
            means[layer].append(h.mean(dim=0).numpy())
            lasts[layer].append(h[-1].numpy())
        feats.step_index.append(i)
        feats.labels.append(int(label))
    n_scalar = len(scalar_names(len(layers)))
    feats.scalars = np.asarray(rows, np.float32).reshape(-1, n_scalar)
    d = int(out.layers[0].shape[-1])
    feats.pooled_mean = {k: np.asarray(v, np.float32).reshape(-1, d) for k, v in means.items()}
    feats.pooled_last = {k: np.asarray(v, np.float32).reshape(-1, d) for k, v in lasts.items()}
    return feats


def _chunk_arrays(sols: Sequence[LabelledSolution], feats: Sequence[SolutionFeatures],
                  pool: Sequence[int]) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {
        "scalars": np.concatenate([f.scalars for f in feats]),
        "labels": np.asarray([lab for f in feats for lab in f.labels], np.int8),
        "step_index": np.asarray([i for f in feats for i in f.step_index], np.int32),
        "id": np.asarray([s.id for s, f in zip(sols, feats, strict=True) for _ in f.labels]),
        "source": np.asarray([s.dataset for s, f in zip(sols, feats, strict=True)
                              for _ in f.labels]),
        "problem_ref": np.asarray([s.problem_ref for s, f in zip(sols, feats, strict=True)
                                   for _ in f.labels]),
    }
    for layer in pool:
        arrays[f"mean_{layer}"] = np.concatenate([f.pooled_mean[layer] for f in feats]) \
            .astype(np.float16)
        arrays[f"last_{layer}"] = np.concatenate([f.pooled_last[layer] for f in feats]) \
            .astype(np.float16)
    return arrays


def _same_model(old: Any, new: Any) -> bool:
    """Whether a cache's recorded fingerprint is this model's (`Fingerprint.mismatch`: a cache
    written before weight digests were recorded matches on the rest)."""
    try:
        return not Fingerprint.model_validate(old).mismatch(Fingerprint.model_validate(new))
    except ValueError:
        return False


def extract(handle: ModelHandle, sols: Sequence[LabelledSolution], cache_dir: Path,
            data: str, progress: bool = True) -> Path:
    """Teacher-force every solution, caching chunks of `CHUNK` solutions under `cache_dir`
    (finished chunks are reused, so an interrupted run resumes); `data` names the labelled file
    (`data.data_ref`) in the cache and the reports. Returns `cache_dir`."""
    from tqdm import tqdm

    n_layers = int(handle.model.config.get_text_config().num_hidden_layers)
    pool = pool_layers_for(n_layers)
    meta = {"fingerprint": fingerprint(handle.model, handle.tokenizer), "data": data,
            "n_capture": CAPTURE_LAST, "pool_layers": list(pool),
            "scalar_names": scalar_names(min(CAPTURE_LAST, n_layers)), "chunk": CHUNK}
    cache_dir.mkdir(parents=True, exist_ok=True)
    meta_path = cache_dir / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if not _same_model(old.get("fingerprint"), meta["fingerprint"]) or \
                {k: old.get(k) for k in meta if k != "fingerprint"} != \
                {k: v for k, v in meta.items() if k != "fingerprint"}:
            raise ValueError(f"{cache_dir} holds features of another model, file or layout; "
                             "pass another --out or delete it")
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    bar = tqdm(total=len(sols), desc=f"teacher-forcing {handle.name}", disable=not progress,
               unit="sol")
    for start in range(0, len(sols), CHUNK):
        part = sols[start : start + CHUNK]
        path = chunk_path(cache_dir, start, len(sols))
        if not path.exists():
            feats = []
            for sol in part:
                feats.append(teacher_force(handle, sol, pool))
                bar.update(1)
            tmp = path.with_suffix(".tmp.npz")
            np.savez(tmp, **_chunk_arrays(part, feats, pool))  # type: ignore[arg-type]
            tmp.rename(path)
        else:
            bar.update(len(part))
    bar.close()
    return cache_dir


@dataclass
class FeatureTable:
    """All cached labelled steps: `scalars[:, j]` is `scalar_names[j]`; `hidden[(pool, layer)]`."""

    meta: dict[str, Any]
    scalars: np.ndarray  # [N, n_scalar] float32
    labels: np.ndarray  # [N] int
    groups: np.ndarray  # [N] problem_ref
    source: np.ndarray  # [N] gsm8k / math
    ids: np.ndarray  # [N]
    hidden: dict[tuple[str, int], np.ndarray]  # [N, d] float16

    def scalar(self, name: str) -> np.ndarray:
        return self.scalars[:, self.meta["scalar_names"].index(name)]


def chunk_path(cache_dir: Path, start: int, n_solutions: int) -> Path:
    """The cache file of the solutions `start .. start + CHUNK - 1` of the first `n_solutions`."""
    return cache_dir / f"chunk-{start:05d}-{min(CHUNK, n_solutions - start):02d}.npz"


def load_features(cache_dir: Path, n_solutions: int) -> FeatureTable:
    """The cached features of the first `n_solutions` solutions, concatenated."""
    meta_path = cache_dir / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"no features in {cache_dir}; run `specguard verifier-eval` first")
    meta = json.loads(meta_path.read_text())
    chunks = [chunk_path(cache_dir, start, n_solutions) for start in range(0, n_solutions, CHUNK)]
    missing = [c.name for c in chunks if not c.exists()]
    if missing:
        raise FileNotFoundError(f"{cache_dir} lacks {len(missing)} feature chunk(s) ({missing[0]}, "
                                "...); run `specguard verifier-eval` with the same --data/--limit")
    parts = [dict(np.load(c)) for c in chunks]

    def cat(key: str) -> np.ndarray:
        return np.concatenate([p[key] for p in parts])

    hidden = {(pool, layer): cat(f"{pool}_{layer}") for pool in ("mean", "last")
              for layer in meta["pool_layers"]}
    return FeatureTable(meta, cat("scalars"), cat("labels").astype(int), cat("problem_ref"),
                        cat("source"), cat("id"), hidden)
