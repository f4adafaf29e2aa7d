"""Cost of the reply grammars now that every JSON response format is constrained, through the
engine's own classes, on the default pair's tokenizer (151,936 tokens); and of the check-only
path's byte-level check.

    python benchmarks/reply_grammar_cost.py [TOKENIZER_DIR]

TOKENIZER_DIR: a folder with the tokenizer (default: the cached Qwen2.5-Coder 1.5B of
`specguard models fetch`, "qwen1.5b"). No model weights are loaded. Torch runs one thread, as the engine
runs a request's own ops (docs/decisions/0011-one-runner-thread.md).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.grammar import GrammarIndex
from specguard_core.decoding.reply_grammar import ANSWER, reply_grammar
from specguard_core.decoding.tool_grammar import call_format, calls_lark, think_terms
from specguard_core.models.registry import resolve
from specguard_core.text.chat import check_tools
from specguard_core.text.formats import ResponseFormat

TRIP = {"type": "object", "required": ["city", "days"], "properties": {
    "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"}, "days": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def ms(run: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) * 1e3


def main(folder: Path) -> None:
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(folder))
    index = GrammarIndex(tok, [tok.eos_token_id], 151936)
    print(f"tokenizer index (once per engine): {ms(index.index):.0f} ms")
    first = index.for_schema(TRIP, 0)
    print(f"first mask after it (once per engine): {ms(lambda: first.allowed([])):.0f} ms")
    calls = calls_lark(check_tools(TOOLS), None, call_format(tok, "<tool_call>", "</tool_call>")
                       or sys.exit("no call markers"), answer=ANSWER)
    text = tok.encode('{"city": "Paris", "days": 2}')
    cases = {"strict schema, as before": lambda: index.for_schema(TRIP, 0),
             "json_object": lambda: index.for_grammar(
                 reply_grammar(ResponseFormat(), None, think_terms(tok)), 0, "j"),
             "schema": lambda: index.for_grammar(
                 reply_grammar(ResponseFormat(TRIP), None, think_terms(tok)), 0, "s"),
             "schema or a tool call": lambda: index.for_grammar(
                 reply_grammar(ResponseFormat(TRIP), calls, think_terms(tok)), 0, "t")}
    logits = torch.randn(1, 151936)
    for name, build in cases.items():
        t0 = time.perf_counter()
        grammar = build()
        compile_ms = (time.perf_counter() - t0) * 1e3
        masks = []
        for i in range(len(text)):
            grammar._masks.clear()  # uncached, as a new sequence is
            masks.append(ms(lambda i=i, g=grammar: g.mask(logits, [text[:i]])))
        print(f"{name}: compile {compile_ms:.1f} ms; one masked row median "
              f"{statistics.median(masks):.3f} ms, max {max(masks):.3f} ms")
    check = AnswerCheck(ResponseFormat(TRIP))
    answer = '{"city": "Paris", "notes": "' + "word " * 400 + '", "days": 2}'
    steps = [answer[:i] for i in range(40, len(answer), 40)] + [answer]
    costs = [ms(lambda a=a: check(a, a is answer)) for a in steps]
    print(f"check-only path, a {len(answer)}-character answer in {len(steps)} steps: median "
          f"{statistics.median(costs):.3f} ms, max {max(costs):.3f} ms a step")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(resolve("qwen1.5b")))
