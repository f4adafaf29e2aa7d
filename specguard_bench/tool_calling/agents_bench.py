"""`specguard bench --suite agents`: GSM8K problems solved by a calculator agent in the real
frameworks, every method behind the same chat model.

Each (task, method): a task is one GSM8K problem (or, with `agent_task="expression"`, its
worked answer chained into one expression to compute, `tool_calling.expressions`) run by one
framework, LangChain's `create_agent` with `ChatSpecGuard` or LlamaIndex's `FunctionAgent` with
`SpecGuardLLM`, no middleware, over `MethodEngine(engine, method)` (so the loop and the parser
are the same for every method) with the tools add, subtract, multiply and divide, and the task's
system prompt. The turn limit is the same for both frameworks: the model call after the limit
raises `TurnLimitReached` inside the framework (the frameworks' own limits, LangChain's
recursion limit and LlamaIndex's `max_iterations`, are set above it and count as the turn limit
too if hit). A framework that raises is that task's end state (`turn_limit` or `error`, with the
message), never a crash of the run.

Stored per task: the final answer and its grade (math-verify, `answers.grade`), the end state
(`answered`, `turn_limit`, `error`), model turns, tool calls, repeated identical calls, invalid
calls, wall time, tokens, steps per path, and each turn's calls and step trace.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specguard_bench.common.methods import preset_of
from specguard_bench.reasoning.answers import grade
from specguard_bench.reasoning.problems import Problem, load_file, load_problems
from specguard_bench.tool_calling.chat_engine import MethodEngine, TurnLimitReached
from specguard_bench.tool_calling.expressions import expression_problems
from specguard_bench.tool_calling.names import AGENT_TASKS
from specguard_bench.tool_calling.suites import (
    SuiteSettings,
    method_config,
    path_counts,
    sync,
    task_seed,
)
from specguard_core.config import NormBounds, SpecGuardConfig
from specguard_core.types import GenerationResult

SYSTEM_PROMPT = ("You solve math word problems with a calculator. Use the tools add, subtract, "
                 "multiply and divide for every arithmetic operation, one operation per call. "
                 "When you know the answer, reply with the final number as \\boxed{number}.")
# --agent-task expression: the same tools, one operation at a time on the results so far
EXPRESSION_PROMPT = ("You are a calculator agent. Work out the expression one operation at a "
                     "time: call one of the tools add, subtract, multiply or divide for the "
                     "innermost operation, wait for its result, then call the next tool on that "
                     "result, until no operation is left. Only then reply with the final number "
                     "as \\boxed{number}.")
SYSTEM_PROMPTS = {"problem": SYSTEM_PROMPT, "expression": EXPRESSION_PROMPT}
END_STATES = ("answered", "turn_limit", "error")


def add(a: float, b: float) -> float:
    """Add two numbers: a + b."""
    return a + b


def subtract(a: float, b: float) -> float:
    """Subtract two numbers: a - b."""
    return a - b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers: a * b."""
    return a * b


def divide(a: float, b: float) -> float | str:
    """Divide two numbers: a / b."""
    return "error: division by zero" if b == 0 else a / b


CALCULATOR: tuple[Callable[..., Any], ...] = (add, subtract, multiply, divide)


@dataclass(frozen=True)
class AgentTask:
    """One GSM8K problem run by one framework; `uid` is `<framework>/<problem uid>`."""

    uid: str
    framework: str
    problem: Problem

    @property
    def digest(self) -> str:
        """The problem's (what it asks and what counts as right)."""
        return self.problem.digest


def load_tasks(settings: SuiteSettings) -> list[AgentTask]:
    """`n` GSM8K problems from `offset` (or of `dataset_file`), each once per framework; with
    `agent_task="expression"`, the first `n` from `offset` that chain into an expression."""
    if settings.agent_task not in AGENT_TASKS:
        raise ValueError(f"unknown agent task {settings.agent_task!r}; choose from "
                         f"{', '.join(AGENT_TASKS)}")
    n = settings.n if settings.agent_task == "problem" else None
    problems = (load_file(settings.dataset_file, n, settings.offset)
                if settings.dataset_file is not None
                else load_problems("gsm8k", n, settings.offset))
    if settings.agent_task == "expression":
        problems = expression_problems(problems, settings.n)
    return [AgentTask(f"{fw}/{p.uid}", fw, p) for p in problems for fw in settings.frameworks]


def run_langchain(chat: MethodEngine, cfg: SpecGuardConfig, system_prompt: str, question: str,
                  turn_limit: int) -> str:
    """The final answer of `create_agent` over `ChatSpecGuard` (raises what the agent raises)."""
    from langchain.agents import create_agent
    from langchain_core.tools import StructuredTool

    from specguard_integrations.langchain import ChatSpecGuard

    model = ChatSpecGuard(engine=chat, config=cfg)
    tools = [StructuredTool.from_function(fn) for fn in CALCULATOR]
    agent = create_agent(model, tools, system_prompt=system_prompt)
    state = agent.invoke({"messages": [{"role": "user", "content": question}]},
                         config={"recursion_limit": 2 * turn_limit + 5})
    return str(state["messages"][-1].text)


def run_llama_index(chat: MethodEngine, cfg: SpecGuardConfig, system_prompt: str,
                    question: str, turn_limit: int) -> str:
    """The final answer of `FunctionAgent` over `SpecGuardLLM` (raises what the agent raises)."""
    import asyncio

    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    from specguard_integrations.llama_index import SpecGuardLLM

    llm = SpecGuardLLM(engine=chat, config=cfg)
    tools = [FunctionTool.from_defaults(fn=fn) for fn in CALCULATOR]
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt=system_prompt, streaming=False)

    async def go() -> str:
        out: Any = await agent.run(user_msg=question, max_iterations=turn_limit + 2)
        return str(out.response.content or "")

    return asyncio.run(go())


RUNNERS: dict[str, Callable[[MethodEngine, SpecGuardConfig, str, str, int], str]] = {
    "langchain": run_langchain, "llama_index": run_llama_index}


def end_state(err: BaseException) -> str:
    """`turn_limit` for our turn limit or a framework's own (LangChain's recursion limit,
    LlamaIndex's max iterations), `error` for anything else."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, TurnLimitReached) or type(seen).__name__ == "GraphRecursionError" \
                or "Max iterations" in str(seen):
            return "turn_limit"
        seen = seen.__cause__ or seen.__context__
    return "error"


def call_key(name: str, arguments: Any) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True, default=str)}"


def turns_summary(results: Sequence[GenerationResult], speculative: bool) -> dict[str, Any]:
    """Counts over a task's model turns: tool calls, repeated identical calls (same name and
    arguments as an earlier call of the task), invalid calls, tokens, steps per path, and each
    turn's calls and step trace."""
    seen: set[str] = set()
    repeated = 0
    for r in results:
        for c in r.tool_calls:
            key = call_key(c.name, c.arguments)
            repeated += key in seen
            seen.add(key)
    return {
        "tool_calls": sum(len(r.tool_calls) for r in results),
        "repeated_calls": repeated,
        "invalid_calls": sum(len(r.invalid_tool_calls) for r in results),
        "new_tokens": sum(r.usage.completion_tokens for r in results),
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results),
        "paths": path_counts(s for r in results for s in r.steps) if speculative else None,
        "turns": [{"text": r.raw_text, "finish_reason": r.finish_reason,
                   "calls": [{"name": c.name, "arguments": c.arguments} for c in r.tool_calls],
                   "invalid_calls": [{"name": c.name, "error": c.error, "raw": c.raw}
                                     for c in r.invalid_tool_calls],
                   "step_trace": [s.trace() for s in r.steps]} for r in results],
    }


def run_task(engine: Any, task: AgentTask, method: str, settings: SuiteSettings,
             bounds: NormBounds | None) -> dict[str, Any]:
    """Run one agent task with one method; its row (errors of the framework recorded in it)."""
    import torch

    problem = task.problem
    seed = task_seed(settings, problem.index)
    torch.manual_seed(seed)
    chat = MethodEngine(engine, method, turn_limit=settings.turn_limit)
    cfg = method_config(engine, method, settings, bounds, seed)
    state, error, answer = "answered", None, ""
    t0 = time.perf_counter()
    try:
        answer = RUNNERS[task.framework](chat, cfg, SYSTEM_PROMPTS[settings.agent_task],
                                         problem.question, settings.turn_limit)
    except Exception as err:  # noqa: BLE001 - the framework's failure is this task's end state
        state, error = end_state(err), f"{type(err).__name__}: {err}"[:2000]
    sync(engine)
    latency = time.perf_counter() - t0
    verdict = grade(answer, problem.gold) if state == "answered" else None
    return {"uid": task.uid, "framework": task.framework, "dataset": problem.dataset,
            "index": problem.index, "method": method, "gold": problem.gold,
            "correct": bool(verdict and verdict.correct),
            "predicted": verdict.predicted if verdict else None, "answer": answer,
            "end_state": state, "error": error, "model_turns": len(chat.streams),
            "latency_s": latency,
            **turns_summary(chat.results(), preset_of(method) is not None)}


def import_frameworks(frameworks: Sequence[str]) -> None:
    """Import the frameworks before any task is timed; a missing one is a clear error."""
    unknown = [f for f in frameworks if f not in RUNNERS]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}; choose from {', '.join(RUNNERS)}")
    needs = {"langchain": (("langchain.agents", "specguard_integrations.langchain"),
                           "`pip install -e '.[langchain]' langchain` (from a checkout)"),
             "llama_index": (("llama_index.core.agent.workflow",
                              "specguard_integrations.llama_index"),
                             "`pip install -e '.[llamaindex]'` (from a checkout)")}
    for framework in frameworks:
        modules, hint = needs[framework]
        try:
            for module in modules:
                importlib.import_module(module)
        except ImportError as err:
            raise ValueError(f"the {framework} agent cannot be imported ({err}); install it "
                             f"with {hint}") from None


def warm_up(engine: Any, method: str, settings: SuiteSettings) -> None:
    """One short untimed tool-calling run of `method` (the engine alone, no framework)."""
    from specguard_bench.tool_calling.bfcl_bench import WARMUP_TOOL

    cfg = method_config(engine, method, settings, None, settings.seed).merged(max_new_tokens=8)
    MethodEngine(engine, method).generate([{"role": "user", "content": "What is 2 + 3?"}],
                                          tools=[WARMUP_TOOL], config=cfg)
