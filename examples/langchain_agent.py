"""A LangChain agent (`create_agent`, a LangGraph graph) with two tools on ChatSpecGuard.

The model has to call a tool to answer; every model turn prints its SpecGuard trace: which steps
the draft wrote and verification accepted, and which the target regenerated.

    python examples/langchain_agent.py                       # the default pair, cached offline
    python examples/langchain_agent.py --draft D --target T  # any draft/target pair
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, wrap_model_call
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from specguard_integrations import ChatSpecGuard

MODELS = Path.home() / ".cache" / "specguard" / "models" / "hf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-bfloat16"
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-bfloat16"
QUESTION = "A box holds 17 pens. How many pens are in 23 boxes? Use a tool to compute it."
SYSTEM = ("Use the tools for arithmetic. Once you have the tool's result, reply to the user in one "
          "plain English sentence that states the number. Never reply with JSON.")


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


@wrap_model_call
def call_then_answer(request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
                     ) -> ModelResponse:
    """Small models need a nudge: require a tool call until one has been made, then require the
    answer. Coder models this small often write a call as bare JSON text instead of a
    `<tool_call>` block; with a call required, SpecGuard's verifier rejects such a step and the
    target regenerates it as a proper tool call. Bigger targets can drop this middleware."""
    called = any(isinstance(m, ToolMessage) for m in request.messages)
    return handler(request.override(tool_choice="none" if called else "any"))


def show(message: BaseMessage) -> None:
    if isinstance(message, AIMessage):
        for step in message.response_metadata.get("specguard_steps", []):
            origin = "draft " if step["accepted"] else "target"
            score = "-" if step["score"] is None else f"{step['score']:.2f}"
            print(f"    step {step['step']} {step['kind']:<9} by {origin} r={score} "
                  f"({step['tokens']} tokens)")
        run = message.response_metadata.get("specguard", {})
        calls = ", ".join(f"{c['name']}({c['args']})" for c in message.tool_calls)
        print(f"AI: {message.content!s}{'  -> ' + calls if calls else ''}")
        for bad in message.invalid_tool_calls:
            print(f"    invalid tool call: {bad['error']}\n    {bad['args']!r}")
        if run:
            print(f"    acceptance_rate={run['acceptance_rate']:.2f} "
                  f"target_token_fraction={run['target_token_fraction']:.2f} "
                  f"wall_time={run['wall_time_s']:.1f}s")
    elif isinstance(message, ToolMessage):
        print(f"Tool {message.name}: {message.content}")
    else:
        print(f"{message.type.capitalize()}: {message.content}")


def register_attention_mask() -> None:
    """Workaround for an engine bug (reported; remove once specguard_core.capture does this):
    the core registers its `specguard_sdpa` attention function with transformers but no mask
    function for it, so transformers builds no causal mask and a multi-token catch-up over a
    filled KV cache (committed draft steps, forced tool-call prefixes) attends wrongly."""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionMaskInterface.register("specguard_sdpa", sdpa_mask)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", default=str(DRAFT))
    parser.add_argument("--target", default=str(TARGET))
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--device", default="auto")
    # Strict: with the default (uncalibrated) normaliser bounds this 0.5B draft scores 0.93-0.97
    # even on off-task steps (e.g. JSON instead of an answer); calibrated bounds (`specguard
    # calibrate`, passed as model_kwargs={"bounds": ...}) make a lower threshold discriminate.
    parser.add_argument("--tau", type=float, default=0.97, help="acceptance threshold")
    args = parser.parse_args()
    register_attention_mask()

    # k=1: with k>1 the engine's selector fails on a step whose candidates all end at their
    # first token (e.g. end-of-turn right after a tool call); reported, to be fixed in the core
    model = ChatSpecGuard(model=args.target, draft_model=args.draft, device=args.device,
                          temperature=0, max_tokens=args.max_tokens, k=1, tau=args.tau)
    agent = create_agent(model, tools=[multiply, add], middleware=[call_then_answer],
                         system_prompt=SYSTEM)
    show(HumanMessage(QUESTION))
    for update in agent.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode="updates"):
        for node in update.values():
            for message in (node or {}).get("messages", []):
                show(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
