"""A LangChain agent (`create_agent`, a LangGraph graph) with two tools on ChatSpecGuard.

The model has to call a tool to answer; every model turn prints its SpecGuard trace: which steps
the draft wrote and verification accepted, and which the target regenerated. Tool calls are the
target's own (the engine checks every action against the target), so the agent needs no steering:
no forced first call, no forced answer after a result.

    python examples/langchain_agent.py                       # the default pair, cached offline
    python examples/langchain_agent.py --draft D --target T  # any draft/target pair
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from specguard_integrations import ChatSpecGuard

QUESTION = "A box holds 17 pens. How many pens are in 23 boxes? Use a tool to compute it."
ANSWER = "391"
SYSTEM = ("Always answer arithmetic with a tool call. When you have the tool's result, reply with "
          "one sentence that states the number.")
MAX_TOKENS = 128


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


def build_agent(model: ChatSpecGuard) -> Any:
    """The agent: the model, both tools and the system prompt."""
    return create_agent(model, tools=[multiply, add], system_prompt=SYSTEM)


def show(message: BaseMessage) -> None:
    if isinstance(message, AIMessage):
        for step in message.response_metadata.get("specguard_steps", []):
            origin = "draft " if step["accepted"] else "target"
            score = "-" if step["score"] is None else f"{step['score']:.2f}"
            print(f"    step {step['index']} {step['kind']:<9} by {origin} r={score} "
                  f"({step['tokens']} tokens)")
        run = message.response_metadata.get("specguard", {})
        calls = ", ".join(f"{c['name']}({c['args']})" for c in message.tool_calls)
        print(f"AI: {message.content!s}{'  -> ' + calls if calls else ''}")
        errors = message.response_metadata.get("specguard_tool_call_errors", {})
        for error in errors.values():  # a call that failed verification: the tool node answers it
            print(f"    tool call failed verification: {error}")
        for bad in message.invalid_tool_calls:
            print(f"    unparseable tool call: {bad['error']}\n    {bad['args']!r}")
        if run:
            print(f"    acceptance_rate={run['acceptance_rate']:.2f} "
                  f"target_token_fraction={run['target_token_fraction']:.2f} "
                  f"wall_time={run['wall_time_s']:.1f}s")
    elif isinstance(message, ToolMessage):
        print(f"Tool {message.name}: {message.content}")
    else:
        print(f"{message.type.capitalize()}: {message.content}")


def ask(agent: Any, question: str = QUESTION, verbose: bool = True) -> list[BaseMessage]:
    """Run the agent on `question`, printing each message as the graph produces it (unless not
    `verbose`); returns the conversation."""
    messages: list[BaseMessage] = [HumanMessage(question)]
    if verbose:
        show(messages[0])
    for update in agent.stream({"messages": messages[:1]}, stream_mode="updates"):
        for node in update.values():
            for message in (node or {}).get("messages", []):
                messages.append(message)
                if verbose:
                    show(message)
    return messages


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
    ask(build_agent(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
