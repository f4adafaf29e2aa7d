"""prompt | ChatSpecGuard | parser on a math word problem, printing SpecGuard's steps as they commit.

The parser is LangChain's `StrOutputParser` followed by a small function that reads the number
after "The answer is".

Each committed step arrives as one streamed chunk; a callback prints where it came from (the draft,
accepted by verification, or the target, which regenerated a rejected draft step) and its score.

    python examples/langchain_chain.py                       # the default pair, cached offline
    python examples/langchain_chain.py --draft D --target T  # any draft/target pair
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

from specguard_core import NormBounds, preset
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_integrations import ChatSpecGuard

BOUNDS = Path(__file__).resolve().parents[1] / "benchmarks" / "bounds-qwen2.5-coder-0.5b.json"
PROBLEM = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
           "in May. How many clips did Natalia sell altogether in April and May?")


def final_number(text: str) -> str | None:
    """The parser's last stage: the number after 'The answer is' (else the last number)."""
    found = re.search(r"answer is\D{0,3}(-?[\d,]+(?:\.\d+)?)", text, re.IGNORECASE)
    numbers = [found.group(1)] if found else re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return numbers[-1].replace(",", "") if numbers else None


class StepPrinter(BaseCallbackHandler):
    """Prints each committed step with its source and score; keeps the run's trace at the end."""

    def __init__(self) -> None:
        self.run: dict[str, Any] = {}
        self.finish_reason = ""

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        meta = chunk.message.response_metadata if chunk is not None else {}
        for step in meta.get("specguard_steps", []):
            score = "  -  " if step["score"] is None else f"{step['score']:.2f}"
            origin = "draft " if step["accepted"] else "target"
            text = chunk.message.content or chunk.message.additional_kwargs.get(
                "reasoning_content", "")
            print(f"[{step['index']:2d} {origin} r={score}] {str(text).strip()}", flush=True)
        self.run = meta.get("specguard", self.run)
        self.finish_reason = meta.get("finish_reason", self.finish_reason)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", default=DEFAULT_DRAFT,
                        help="model id, cached name, folder or .gguf (default: %(default)s, "
                             "found in the `specguard models fetch` cache)")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="as --draft (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--bounds", default=str(BOUNDS) if BOUNDS.is_file() else None,
                        help="normaliser bounds from `specguard calibrate` (default: the pair's)")
    parser.add_argument("--tau", type=float, default=None, help="acceptance threshold")
    args = parser.parse_args()

    bounds = {"bounds": NormBounds.load(args.bounds)} if args.bounds else {}
    model = ChatSpecGuard(draft=args.draft, target=args.target, device=args.device,
                          config=preset("fast", **bounds), max_tokens=args.max_tokens,
                          tau=args.tau)
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You are a math tutor. Keep answers under 80 words."),
        ("human", "{problem}\n\nWork it out in short paragraphs, then write 'The answer is' "
                  "followed by the number."),
    ])
    chain = prompt | model | StrOutputParser() | RunnableLambda(final_number)

    printer = StepPrinter()
    print(f"Problem: {PROBLEM}\n")
    pieces = list(chain.stream({"problem": PROBLEM}, config={"callbacks": [printer]}))
    print(f"\nParsed answer: {pieces[-1] if pieces else None}")
    run = printer.run
    if run:
        print(f"finish_reason={printer.finish_reason} steps={run['steps']} "
              f"accepted={run['steps_accepted']} regenerated={run['steps_regenerated']} "
              f"acceptance_rate={run['acceptance_rate']:.2f} "
              f"target_token_fraction={run['target_token_fraction']:.2f} "
              f"wall_time={run['wall_time_s']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
