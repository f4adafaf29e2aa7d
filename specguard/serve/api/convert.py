"""OpenAI requests -> engine inputs; engine results -> OpenAI responses (stream chunks:
`chunks.py`).

Pure functions, no I/O: `running/generation.py` does the HTTP. Responses are the `openai`
package's own types (`ChatCompletion`, `Completion`), validated as they are built; `wire.dump`
makes them JSON. Every response and chunk carries the SpecGuard trace in a `specguard` extension
field (`StepRecord.trace()` per step, `GenerationResult.trace()` per run), which OpenAI clients
ignore and keep in `model_extra`.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageToolCall
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message_tool_call import Function
from openai.types.completion_usage import CompletionTokensDetails
from pydantic import ValidationError

from specguard.serve.api.extension import Limits, validation_text
from specguard.serve.api.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from specguard_core.config import SpecGuardConfig
from specguard_core.text.chat import content_text
from specguard_core.text.tool_calls import surfaced
from specguard_core.types import FinishReason, GenerationResult, StepRecord, ToolCall


# ---- requests -> engine inputs ---------------------------------------------------------------
def engine_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI chat messages as the engine's message dicts (text content, tool calls kept). A
    "developer" message is a system message, as OpenAI treats it for models without that role
    (open chat templates would otherwise drop it silently)."""
    out = []
    for i, m in enumerate(messages):
        role = "system" if m.role == "developer" else m.role
        msg: dict[str, Any] = {"role": role, "content": content_text(m.content, f"message {i}")}
        for key in ("name", "tool_calls", "tool_call_id"):
            if getattr(m, key) is not None:
                msg[key] = getattr(m, key)
        out.append(msg)
    return out


def request_config(base: SpecGuardConfig, req: ChatCompletionRequest | CompletionRequest,
                   limits: Limits | None = None) -> SpecGuardConfig:
    """The request's SpecGuardConfig: the server's config, then the OpenAI sampling fields (and
    vLLM's top_k, min_p, repetition_penalty), then the `specguard` extension's knobs (a knob set
    in both places must have one value: `problems` refuses two); a budget over the operator's
    `limits.max_tokens`, or none under it, is that cap. Raises ValueError naming the bad field,
    without the values sent."""
    limits = limits or Limits()
    overrides = req.openai_knobs()
    if req.specguard is not None:
        overrides.update(req.specguard.overrides(limits))
    try:
        cfg = base.merged(**overrides)
    except ValidationError as err:
        raise ValueError(validation_text(err)) from None
    cap = limits.max_tokens  # the operator's cap bounds a request that sets no budget too
    if cap is not None and (cfg.max_new_tokens is None or cfg.max_new_tokens > cap):
        cfg = cfg.merged(max_new_tokens=cap)
    return cfg


def choice_configs(cfg: SpecGuardConfig, n: int) -> list[SpecGuardConfig]:
    """One config per choice: the same request with seeds seed, seed+1, ... (greedy choices are
    then identical, as the target's own greedy output would be)."""
    return [cfg] + [cfg.merged(seed=cfg.seed + i) for i in range(1, n)]


# ---- engine results -> responses ----------------------------------------------------------
def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def openai_finish(reason: FinishReason) -> str:
    """OpenAI has no "max_steps": the run hit a limit, which OpenAI calls "length" (the trace keeps
    the engine's own reason)."""
    return "length" if reason == "max_steps" else reason


def answered_calls(result: GenerationResult) -> list[ToolCall]:
    """The run's calls a client sees as tool calls, in the order written (`ToolCall.shown`: valid
    ones, and invalid ones that name a tool, as vLLM's parsers return them, so an agent's tool
    node answers the error and the model retries). With `parallel_tool_calls=false` the engine
    ends the run at its first call."""
    return surfaced(result.calls_written)


def chat_finish(result: GenerationResult, calls: Sequence[ToolCall] | None = None) -> str:
    """A chat choice's finish_reason: "tool_calls" when a call is returned (`calls`, else
    `answered_calls`) and the run stopped on its own (a run whose only calls are invalid ends
    "stop" in the engine)."""
    if calls is None:
        calls = answered_calls(result)
    if result.finish_reason == "stop" and calls:
        return "tool_calls"
    return openai_finish(result.finish_reason)


def usage(result: GenerationResult | Sequence[GenerationResult], n: int | None = None
          ) -> CompletionUsage:
    """OpenAI's usage of one run, or of the runs of n choices (the prompt counted once), or of
    several prompts' runs, `n` each (each prompt counted once)."""
    results = [result] if isinstance(result, GenerationResult) else list(result)
    prompt = sum(r.usage.prompt_tokens for r in results[:: n or len(results)])
    completion = sum(r.usage.completion_tokens for r in results)
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    reasoning = sum(len(s.token_ids) for r in results for s in r.steps if s.kind == "reasoning")
    if reasoning:
        out["completion_tokens_details"] = CompletionTokensDetails(reasoning_tokens=reasoning)
    return CompletionUsage(**out)


def openai_tool_call(call: ToolCall) -> ChatCompletionMessageToolCall:
    return ChatCompletionMessageToolCall(
        id=call.id, type="function",
        function=Function(name=call.name,
                          arguments=json.dumps(call.arguments, ensure_ascii=False)))


def _invalid(result: GenerationResult) -> list[dict[str, Any]]:
    return [{"id": c.id, "name": c.name, "raw": c.raw, "error": c.error}
            for c in result.invalid_tool_calls]


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats (an -inf log-prob, say) as None: JSON has no Infinity/NaN
    and strict clients reject them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def step_trace(step: StepRecord) -> dict[str, Any]:
    return json_safe(step.trace())


def run_trace(result: GenerationResult, steps: bool = True) -> dict[str, Any]:
    """The run's trace for the `specguard` field; invalid tool calls (which OpenAI's format has no
    place for) are listed there too."""
    trace = result.trace()
    if not steps:
        trace.pop("steps")
    trace["invalid_tool_calls"] = _invalid(result)
    return json_safe(trace)


def chat_response(result: GenerationResult, rid: str, model: str,
                  logprobs: list[dict[str, Any]] | None = None, echo: str = ""
                  ) -> ChatCompletion:
    """A `chat.completion` object. `tool_calls` holds `answered_calls`. `logprobs`: the answer's
    `logprobs.content` entries (`text.logprobs.answer_logprobs`); `echo`: the text the content
    starts with (vLLM's `echo`: the assistant message the reply continued)."""
    message: dict[str, Any] = {"role": "assistant", "content": (echo + result.text) or None,
                               "refusal": None}
    calls = answered_calls(result)
    if calls:
        message["tool_calls"] = [openai_tool_call(c) for c in calls]
    elif not message["content"]:
        message["content"] = ""
    if result.reasoning:  # vLLM's two names: `reasoning` now, `reasoning_content` before
        message["reasoning"] = message["reasoning_content"] = result.reasoning
    choice = Choice(index=0, message=ChatCompletionMessage(**message),
                    logprobs=None if logprobs is None else
                    ChoiceLogprobs(content=logprobs, refusal=None),
                    finish_reason=chat_finish(result, calls))
    return ChatCompletion(id=rid, object="chat.completion", created=int(time.time()), model=model,
                          choices=[choice], usage=usage(result), specguard=run_trace(result))


def merge_choices(bodies: Sequence[ChatCompletion | Completion],
                  results: Sequence[GenerationResult]) -> ChatCompletion | Completion:
    """The response of n choices from n single-choice bodies: choices indexed 0..n-1, usage over
    all runs (prompt once), and `specguard` as {"choices": [each run's trace]}; one body as is."""
    if len(bodies) == 1:
        return bodies[0]
    choices = [b.choices[0].model_copy(update={"index": i}) for i, b in enumerate(bodies)]
    traces = [(b.model_extra or {})["specguard"] for b in bodies]
    return type(bodies[0]).model_validate({**bodies[0].model_dump(exclude_unset=True),
                                           "choices": choices, "usage": usage(results),
                                           "specguard": {"choices": traces}})
