"""Tiny random GGUF models for the llama.cpp backend's tests: a transformers Qwen2 model written
as a float32 GGUF by the `gguf` package (its tensors named by gguf's own Qwen2 name map, its
byte-level BPE vocabulary, merges and chat template in the file), so llama.cpp and transformers
read the same weights and ids. No hub, no network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest


def write_gguf(model: Any, tokenizer: Any, path: Path) -> Path:
    """`model` (a transformers Qwen2ForCausalLM) and `tokenizer` as one GGUF file at `path`."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name(path.stem)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(getattr(cfg, "rope_theta", None)
                                    or cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _vocab(writer, tokenizer, int(cfg.eos_token_id))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, cfg.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # llama.cpp reads the tied output from token_embd
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert mapped is not None, f"no GGUF name for {name}"
        writer.add_tensor(mapped, tensor.detach().float().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _vocab(writer: gguf.GGUFWriter, tokenizer: Any, eos: int) -> None:
    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert len(tokens) == len(tokenizer) and all(vocab[t] == i for i, t in enumerate(tokens))
    special = set(tokenizer.all_special_tokens) | {str(t) for t in tokenizer.added_tokens_decoder.values()}
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL
                            for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def gguf_pair(root: Path, pair: tuple[Any, Any, Any, Any]) -> tuple[Path, Path]:
    """The draft and target of a transformers `pair` (draft, tokenizer, target, tokenizer) as
    GGUF files under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    return (write_gguf(pair[0], pair[1], root / "draft.gguf"),
            write_gguf(pair[2], pair[3], root / "target.gguf"))


needs_llama_cpp = pytest.mark.skipif(
    __import__("importlib").util.find_spec("llama_cpp") is None,
    reason='llama-cpp-python is not installed (pip install -e ".[llamacpp]")')
