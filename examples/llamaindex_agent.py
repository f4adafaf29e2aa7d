"""A LlamaIndex `FunctionAgent` on SpecGuard: tool calls verified step by step, streamed answer.

    python examples/llamaindex_agent.py [--draft MODEL --target MODEL] [--preset NAME]
                                        [--question TEXT]

Runs offline with the default pair cached by `specguard models fetch` (Qwen2.5-Coder 0.5B draft,
1.5B target). Each tool call is one SpecGuard step: the draft proposes it and the target checks
it, so the calls (and the choice between calling a tool and answering) are the target's own; a
call that names no tool or breaks a tool's schema reaches the agent as a tool call, which the
agent answers with the tool's error so that the model can try again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from llama_index.core.agent.workflow import (  # noqa: E402
    AgentInput,
    AgentStream,
    FunctionAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402

from specguard_integrations import SpecGuardLLM  # noqa: E402
from specguard_integrations.llama_index.trace_handler import SpecGuardTraceHandler  # noqa: E402

STOCK = {"apples": 120, "pears": 45, "plums": 0}
PRICES = {"apples": 0.5, "pears": 0.8, "plums": 1.2}
QUESTION = "How many pears do we have in stock?"
ANSWER = "45"
MAX_TOKENS = 120
SYSTEM = ("You are a shop assistant. Use the tools to look up facts and to compute, then answer in "
          "one sentence.")


def check_stock(fruit: str) -> int:
    """How many units of a fruit (apples, pears or plums) are in stock."""
    return STOCK.get(fruit.lower().strip(), 0)


def unit_price(fruit: str) -> float:
    """The price in dollars of one unit of a fruit (apples, pears or plums)."""
    return PRICES.get(fruit.lower().strip(), 0.0)


def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def print_traces(traces: list[dict[str, Any]]) -> None:
    print("\n--- SpecGuard trace, one block per LLM call ---")
    for n, trace in enumerate(traces, 1):
        stats = trace["stats"]
        print(f"call {n}: finish {trace['finish_reason']}, acceptance "
              f"{stats['acceptance_rate']:.2f}, target tokens {stats['target_token_fraction']:.2f}, "
              f"{stats['wall_time_s']:.1f} s, usage {trace['usage']}")
        for s in trace["steps"]:
            score = "  -  " if s["score"] is None else f"{s['score']:.2f}"
            note = f"  (draft rejected: {s['rejected_reason']})" if s["rejected_reason"] else ""
            text = s["text"].replace("\n", "\\n")
            print(f"  {s['index']:>2} {s['source']:6} {s['kind']:9} {score} {text[:70]}{note}")


def build_agent(llm: SpecGuardLLM) -> FunctionAgent:
    """The agent: the three tools and the system prompt; the model decides when to call them."""
    return FunctionAgent(tools=[check_stock, unit_price, multiply], llm=llm, system_prompt=SYSTEM)


async def run(agent: FunctionAgent, question: str = QUESTION, verbose: bool = True) -> str:
    """The agent's final answer to `question`; prints the streamed events unless not `verbose`."""
    handler = agent.run(user_msg=question)
    async for event in handler.stream_events():
        if not verbose:
            continue
        if isinstance(event, AgentInput):
            print("\n[assistant] ", end="", flush=True)
        elif isinstance(event, AgentStream) and event.delta:
            print(event.delta, end="", flush=True)  # one delta per committed step
        elif isinstance(event, ToolCall) and not isinstance(event, ToolCallResult):
            print(f"\n[tool call] {event.tool_name}({event.tool_kwargs})", flush=True)
        elif isinstance(event, ToolCallResult):
            print(f"[tool result] {event.tool_output.content}", flush=True)
    result: Any = await handler
    return str(result.response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draft", help="model id, cached name, folder or .gguf (default: the "
                        "library's default pair, found in the `specguard models fetch` cache)")
    parser.add_argument("--target", help="as --draft (give both or neither)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--preset", help="paper, balanced or fast (default: the library's, "
                        "balanced)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--question", default=QUESTION)
    args = parser.parse_args()

    llm = SpecGuardLLM(draft=args.draft, target=args.target, device=args.device, dtype=args.dtype,
                       preset=args.preset, max_tokens=args.max_tokens)
    collector = SpecGuardTraceHandler()
    get_dispatcher().add_event_handler(collector)
    agent = build_agent(llm)
    print(f"[user] {args.question}  (the pair loads at the first model call)")
    t0 = time.perf_counter()
    answer = asyncio.run(run(agent, args.question))
    print(f"\n\n[final answer] {answer}  ({time.perf_counter() - t0:.1f} s)")
    print_traces(collector.traces)


if __name__ == "__main__":
    main()
