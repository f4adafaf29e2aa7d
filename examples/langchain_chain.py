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
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

from specguard_integrations import ChatSpecGuard

PROBLEM = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
           "in May. How many clips did Natalia sell altogether in April and May?")
ANSWER = "72"
MAX_TOKENS = 200


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


def build_chain(model: ChatSpecGuard) -> Runnable[dict[str, str], str | None]:
    """prompt | model | StrOutputParser | final_number."""
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You are a math tutor. Keep answers under 80 words."),
        ("human", "{problem}\n\nWork it out in short paragraphs, then write 'The answer is' "
                  "followed by the number."),
    ])
    return prompt | model | StrOutputParser() | RunnableLambda(final_number)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", help="model id, cached name, folder or .gguf (default: the "
                        "library's default pair, found in the `specguard models fetch` cache)")
    parser.add_argument("--target", help="as --draft (give both or neither)")
    parser.add_argument("--preset", help="paper, balanced or fast (default: the library's, "
                        "balanced)")
    parser.add_argument("--tau", type=float, help="acceptance threshold (default: the preset's)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    model = ChatSpecGuard(draft=args.draft, target=args.target, preset=args.preset,
                          tau=args.tau, device=args.device, max_tokens=args.max_tokens)
    chain = build_chain(model)

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
