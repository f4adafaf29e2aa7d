"""Cost of grammar-constrained decoding on this CPU: llguidance's token mask for a JSON schema.

Constrained decoding (the draft and the target's fallback may only write tokens a JSON schema's
grammar allows) needs, per written token, one token mask over the whole vocabulary and one
consumed token; the target's check of a k-token draft run needs k masks. This measures those
costs with the real tokenizer of the default pair, to set beside a token's decode cost
(benchmarks/RESULTS.md: 0.130 s a draft token, 0.330 s a target pass on one core).

    pip install llguidance
    python benchmarks/constrained_cost.py [TOKENIZER_DIR] [--repeat 5]

TOKENIZER_DIR: a folder with the tokenizer (default: the cached Qwen2.5-Coder 0.5B of
`specguard models fetch`). No model weights are loaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "email": {"type": "string"}},
          "required": ["name", "age"], "additionalProperties": False}
PERSON_TEXT = json.dumps({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org"})
CALL = {"type": "object", "properties": {
    "name": {"const": "calculate_triangle_area"},
    "arguments": {"type": "object", "properties": {"base": {"type": "integer"},
                                                   "height": {"type": "integer"},
                                                   "unit": {"type": "string"}},
                  "required": ["base", "height"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}
CALL_TEXT = json.dumps({"name": "calculate_triangle_area",
                        "arguments": {"base": 10, "height": 5, "unit": "units"}})


def default_tokenizer_dir() -> Path:
    from specguard_core.models.registry import resolve

    return Path(resolve("qwen0.5b"))


def measure(lltok: Any, hf_tok: Any, schema: dict[str, Any], text: str, repeat: int
            ) -> dict[str, float]:
    import llguidance
    import llguidance.numpy as lnp

    ids = hf_tok.encode(text, add_special_tokens=False)
    compile_s, mask_s, consume_s, batch_s = [], [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        matcher = llguidance.LLMatcher(lltok, grammar)
        compile_s.append(time.perf_counter() - t0)
        assert not matcher.is_error(), matcher.get_error()
        bitmask = lnp.allocate_token_bitmask(1, lltok.vocab_size)
        for tok in ids:
            t0 = time.perf_counter()
            lnp.fill_next_token_bitmask(matcher, bitmask, 0)
            t1 = time.perf_counter()
            allowed = bool((bitmask[0, tok // 32] >> (tok % 32)) & 1)
            assert allowed, f"token {tok} ({hf_tok.decode([tok])!r}) refused by the grammar"
            assert matcher.consume_token(tok), matcher.get_error()
            t2 = time.perf_counter()
            mask_s.append(t1 - t0)
            consume_s.append(t2 - t1)
        assert matcher.is_accepting()
        # the target's check of a whole draft run: one mask per position, then roll back
        matcher.rollback(len(ids))
        t0 = time.perf_counter()
        for tok in ids:
            lnp.fill_next_token_bitmask(matcher, bitmask, 0)
            matcher.consume_token(tok)
        matcher.rollback(len(ids))
        batch_s.append((time.perf_counter() - t0) / len(ids))
    return {"tokens": len(ids), "compile_ms": 1e3 * statistics.median(compile_s),
            "mask_ms_median": 1e3 * statistics.median(mask_s),
            "mask_ms_p95": 1e3 * statistics.quantiles(mask_s, n=20)[-1],
            "consume_ms_median": 1e3 * statistics.median(consume_s),
            "run_check_ms_per_token": 1e3 * statistics.median(batch_s)}


def apply_ms(vocab: int, rows: int, repeat: int = 50) -> float:
    """Median ms to set the refused tokens' logits to -inf for `rows` positions (llguidance's
    torch helper, the packed bitmask over the whole vocabulary)."""
    import llguidance.torch as ltorch
    import torch

    logits = torch.randn(rows, vocab)  # [rows, vocab]
    mask = ltorch.allocate_token_bitmask(rows, vocab)  # [rows, ceil(vocab / 32)] int32
    mask[:, ::2] = -1
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ltorch.apply_token_bitmask_inplace(logits, mask)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_dir", nargs="?", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import llguidance.hf
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    hf_tok = AutoTokenizer.from_pretrained(args.tokenizer_dir or default_tokenizer_dir())
    lltok = llguidance.hf.from_tokenizer(hf_tok)  # type: ignore[arg-type]  # a fast tokenizer
    print(f"tokenizer: vocab {lltok.vocab_size}, wrapped in {time.perf_counter() - t0:.2f} s")
    print(f"mask applied to logits: {apply_ms(lltok.vocab_size, 1):.3f} ms for 1 row, "
          f"{apply_ms(lltok.vocab_size, 16):.3f} ms for 16 rows (a check run), float32 on torch")
    for name, schema, text in (("response_format Person", PERSON, PERSON_TEXT),
                               ("tool call (name + arguments)", CALL, CALL_TEXT)):
        r = measure(lltok, hf_tok, schema, text, args.repeat)
        print(f"{name}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in r.items()))


if __name__ == "__main__":
    main()
