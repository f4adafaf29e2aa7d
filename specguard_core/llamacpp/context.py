"""One GGUF model in a llama.cpp context, through `llama-cpp-python`'s C API (`llama_cpp.llama_cpp`).

`LlamaContext` owns the model and its context: one KV cache shared by every request (unified
across sequences), each request holding sequences of it (`acquire` / `release`), and `decode`, one
`llama_decode` over rows of tokens, each row a sequence at its own positions, returning the logits
(and final hidden states) of the positions asked for. Every call into llama.cpp holds the
context's lock: a context is not thread-safe, and a sequence released by the garbage collector of
another thread is cleared under it too.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

_READY: list[bool] = []  # the backend was initialised (once per process)
INSTALL = 'pip install -e ".[llamacpp]"  (llama-cpp-python, built from source: a few minutes)'


class LlamaCppError(RuntimeError):
    """llama.cpp could not load a model or run a forward; the message says what to do."""


def binding() -> Any:
    """`llama_cpp.llama_cpp` (the C API), its backend initialised once and its log quiet; an
    ImportError with the install line when `llama-cpp-python` is missing."""
    try:
        import llama_cpp
    except ImportError as err:
        raise ImportError(f"the llama.cpp backend needs llama-cpp-python: {INSTALL}") from err
    lib = llama_cpp.llama_cpp
    if not _READY:
        # llama.cpp's own log, whose warnings the binding reports at ERROR: our errors say it all
        logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL)
        lib.llama_backend_init()
        _READY.append(True)
    return lib


@dataclass
class Decoded:
    """What one `decode` gives: `logits: [n_out, V]` and, when asked, `hidden: [n_out, d]` (the
    final hidden state), for the positions asked for, in the rows' order."""

    logits: torch.Tensor
    hidden: torch.Tensor | None


class LlamaContext:
    """A GGUF model loaded by llama.cpp with one context of `n_ctx` KV cells (0: the model's
    training window) shared by up to `n_seq` sequences, run with `threads` threads. The KV cache
    is float16 (llama.cpp's default), or float32 with `f32_cache` (multi-token and one-token
    forwards then round alike to about 1e-5, which exactness tests need)."""

    def __init__(self, path: str | Path, *, n_ctx: int = 0, n_seq: int = 64,
                 threads: int = 1, f32_cache: bool = False) -> None:
        lib = self.lib = binding()
        self.lock = threading.RLock()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = 0
        # no "extra" weight buffers (AMX, repacked layouts): on the 2-core Xeon VMs here the AMX
        # kernel crashed llama_decode on the Qwen2.5 GGUFs (docs/decisions/0018-llama-cpp-binding.md)
        mparams.use_extra_bufts = False
        self.model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise LlamaCppError(f"llama.cpp could not load {path}: not a GGUF model file it "
                                "reads (check the file, or use --backend transformers)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_embd = int(lib.llama_model_n_embd(self.model))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(self.model))
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx or self.n_ctx_train
        cparams.n_batch = cparams.n_ctx  # a whole prompt in one call; llama.cpp splits it
        cparams.n_seq_max = n_seq
        cparams.kv_unified = True  # forks share the prefix's cells
        cparams.n_threads = cparams.n_threads_batch = threads
        if f32_cache:
            cparams.type_k = cparams.type_v = 0  # GGML_TYPE_F32
            cparams.flash_attn_type = 0  # its CPU kernel computes in float16
        self.ctx = lib.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise LlamaCppError(f"llama.cpp could not make a context of {cparams.n_ctx} tokens "
                                f"for {path}; lower the context size")
        self.n_ctx = int(lib.llama_n_ctx(self.ctx))
        self.memory = lib.llama_get_memory(self.ctx)
        self.threads = threads
        self.eog = frozenset(i for i in range(self.n_vocab) if lib.llama_vocab_is_eog(self.vocab, i))
        self._free = list(range(n_seq - 1, -1, -1))
        self._embeddings = False

    # ---- sequences ------------------------------------------------------------------------
    def acquire(self) -> int:
        """A free sequence id (its cells empty)."""
        with self.lock:
            if not self._free:
                raise LlamaCppError("every llama.cpp sequence of this model is in use (one per "
                                    "request, k per proposal): fewer concurrent requests or "
                                    "candidates")
            return self._free.pop()

    def release(self, seq: int) -> None:
        """Forget `seq`'s cells and make it free again (nothing once the context is closed)."""
        with self.lock:
            if self.memory is None:
                return
            self.lib.llama_memory_seq_rm(self.memory, seq, -1, -1)
            self._free.append(seq)

    def remove(self, seq: int, start: int) -> None:
        """Forget `seq`'s positions from `start` on."""
        with self.lock:
            self._open()
            self.lib.llama_memory_seq_rm(self.memory, seq, start, -1)

    def copy(self, src: int, dst: int) -> None:
        """`dst` holds exactly `src`'s positions (the cells are shared, not copied)."""
        with self.lock:
            self._open()
            self.lib.llama_memory_seq_rm(self.memory, dst, -1, -1)
            self.lib.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    # ---- forwards -------------------------------------------------------------------------
    def decode(self, rows: Sequence[tuple[int, int, Sequence[int]]], all_logits: bool,
               hidden: bool = False, read: bool = True) -> Decoded | None:
        """One forward over `rows` of (sequence, first position, tokens): the logits of each
        row's last position, or of every position with `all_logits` (row by row); None with
        `read=False` (they stay in the context, for llama.cpp's own samplers)."""
        lib = self.lib
        n = sum(len(toks) for _, _, toks in rows)
        batch = lib.llama_batch_init(n, 0, 1)
        try:
            i = 0
            for seq, pos, toks in rows:
                for j, tok in enumerate(toks):
                    batch.token[i], batch.pos[i] = int(tok), pos + j
                    batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq
                    batch.logits[i] = all_logits or j == len(toks) - 1
                    i += 1
            batch.n_tokens = n
            n_out = sum(len(toks) if all_logits else 1 for _, _, toks in rows)
            with self.lock:
                self._open()
                if hidden != self._embeddings:
                    lib.llama_set_embeddings(self.ctx, hidden)
                    self._embeddings = hidden
                rc = lib.llama_decode(self.ctx, batch)
                if rc != 0:
                    raise LlamaCppError(self._decode_problem(rc, n))
                if not read:
                    return None
                logits = _array(lib.llama_get_logits(self.ctx), n_out, self.n_vocab)
                embd = _array(lib.llama_get_embeddings(self.ctx), n_out, self.n_embd) \
                    if hidden else None
        finally:
            lib.llama_batch_free(batch)
        return Decoded(logits, embd)

    def _open(self) -> None:
        if self.memory is None:
            raise LlamaCppError("this llama.cpp context was closed; load the model again")

    def _decode_problem(self, rc: int, n: int) -> str:
        if rc == 1:
            return (f"llama.cpp found no room for {n} more tokens in its KV cache of {self.n_ctx} "
                    "(shared by the requests in flight): raise the context size (LoadOptions"
                    "(context_size=...), --context-size) or run fewer requests at once")
        return f"llama.cpp's forward failed (llama_decode returned {rc})"

    def close(self) -> None:
        """Free the context and the model; any later call is a LlamaCppError."""
        with self.lock:
            if self.ctx:
                self.lib.llama_free(self.ctx)
                self.lib.llama_model_free(self.model)
                self.ctx = self.model = self.memory = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def _array(ptr: Any, rows: int, width: int) -> torch.Tensor:
    """`rows x width` floats at `ptr` as a float32 tensor of our own (copied)."""
    view = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                 shape=(rows, width))
    return torch.from_numpy(view.copy())
