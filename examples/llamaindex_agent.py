"""A LlamaIndex `FunctionAgent` on SpecGuard: tool calls verified step by step, streamed answer.

    python examples/llamaindex_agent.py [--draft MODEL] [--target MODEL] [--question TEXT]

Runs offline with the default pair cached by `specguard models fetch` (Qwen2.5-Coder 0.5B draft,
1.5B target). Each tool call is one SpecGuard step: the draft proposes it, and a call that does not
parse, names an unknown tool or breaks the tool's schema is rewritten by the target.

The small Coder pair often writes a tool call as bare JSON (or in a ```json fence) instead of
inside the `<tool_call>` tags its chat template asks for; the engine treats such a step as a tool
call too (when tools are offered) and verifies it the same way. The agent's first turn is still
asked to call a tool (`initial_tool_choice`, `--first-tool-choice`), so a draft step that is not a
tool call is rejected and the target opens the `<tool_call>` block itself. With a larger pair,
pass `--first-tool-choice auto`.
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

from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET  # noqa: E402
from specguard_integrations import SpecGuardLLM  # noqa: E402
from specguard_integrations.llama_index_trace import SpecGuardTraceHandler  # noqa: E402

STOCK = {"apples": 120, "pears": 45, "plums": 0}
PRICES = {"apples": 0.5, "pears": 0.8, "plums": 1.2}


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


async def run(agent: FunctionAgent, question: str) -> str:
    handler = agent.run(user_msg=question)
    async for event in handler.stream_events():
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
    parser.add_argument("--draft", default=DEFAULT_DRAFT,
                        help="model id, cached name, folder or .gguf (default: %(default)s, "
                             "found in the `specguard models fetch` cache)")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="as --draft (default: %(default)s)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--preset", default="fast", choices=["fast", "paper"])
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--question", default="How many pears do we have in stock?")
    parser.add_argument("--first-tool-choice", default="required",
                        help="tool_choice of the agent's first turn: required, a tool name or auto")
    args = parser.parse_args()

    t0 = time.perf_counter()
    llm = SpecGuardLLM(draft=args.draft, target=args.target, device=args.device, dtype=args.dtype,
                       preset=args.preset, max_tokens=args.max_tokens)
    print(f"loaded {llm.metadata.model_name} in {time.perf_counter() - t0:.1f} s")
    collector = SpecGuardTraceHandler()
    get_dispatcher().add_event_handler(collector)

    agent = FunctionAgent(
        tools=[check_stock, unit_price, multiply], llm=llm,
        initial_tool_choice=args.first_tool_choice,
        system_prompt="You are a shop assistant. Use the tools to look up facts and to compute, "
                      "then answer in one sentence.")
    print(f"\n[user] {args.question}")
    t0 = time.perf_counter()
    answer = asyncio.run(run(agent, args.question))
    print(f"\n\n[final answer] {answer}  ({time.perf_counter() - t0:.1f} s)")
    print_traces(collector.traces)


if __name__ == "__main__":
    main()
