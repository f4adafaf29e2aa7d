"""The OpenAI wire format the server speaks: request bodies (validated) and the error body.

Request models forbid unknown fields, as OpenAI does ("Unrecognized request argument"), so a typo
or a feature this server lacks is a 400 rather than silently ignored. Fields OpenAI defines that
SpecGuard cannot honour are declared and rejected by `unsupported()` when set to anything but their
no-op value; fields that change nothing here (user, metadata, store, ...) are accepted and ignored.
Responses are built as the `openai` package's own types (`convert.py`, `chunks.py`, `wire.py`).

This is the server's trust boundary: a remote client sets sampling and algorithm knobs only
(`SpecGuardExtension`), within the operator's `Limits`, never paths, model names or loader
options; `problems(limits)` is checked before a request is admitted (the knobs and their
bounds: `extension.py`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from specguard.serve.api import checks
from specguard.serve.api.extension import MAX_STOPS, Limits, SpecGuardExtension, stops_ok
from specguard_core.engine.run.start import MAX_TOP_LOGPROBS  # the engine's bound, vLLM's default

MAX_N = 16  # choices per request (each is a full engine run)
MAX_RUNS = 64  # /v1/completions: prompts x n per request (one engine run each)



def continuation(continue_final_message: bool | None,
                 add_generation_prompt: bool | None) -> bool | None:
    """The engine's `continue_final_message` from vLLM's two chat flags: as set, else not when a
    generation prompt is asked for, else (None) when the conversation ends with an assistant
    message."""
    if continue_final_message is not None:
        return continue_final_message
    return None if add_generation_prompt is None else not add_generation_prompt


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI's; nothing to obfuscate here
    continuous_usage_stats: bool | None = None  # vLLM's; accepted at its default (false) only


class ChatMessage(BaseModel):
    """One message; fields a client echoes back from an earlier response (refusal, annotations,
    reasoning_content, ...) are dropped."""

    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Sampling(BaseModel):
    """Fields shared by both generation endpoints."""

    model_config = ConfigDict(extra="forbid")

    model: str
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    # vLLM's extra sampling parameters (OpenAI clients send them with extra_body={...})
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(None, gt=0.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2**64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=MAX_N, description="choices: one engine run each, with "
                          "seeds seed, seed+1, ...")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM's request fields, accepted at the values that are what this server does anyway
    skip_special_tokens: bool | None = None  # true: special tokens are never in the text
    include_stop_str_in_output: bool | None = None  # false: a stop string ends the text
    min_tokens: int | None = Field(None, ge=0)  # 0: no minimum
    ignore_eos: bool | None = None  # false: the end-of-turn token ends the reply
    spaces_between_special_tokens: bool | None = None  # true: special tokens are not in the text
    # SpecGuard's own per-request knobs (sampling and algorithm knobs of SpecGuardConfig: k, tau,
    # beta, ...), sent by OpenAI clients as `extra_body={"specguard": {...}}`
    specguard: SpecGuardExtension | None = None

    @property
    def choices(self) -> int:
        return self.n or 1

    def stops(self) -> tuple[str, ...] | None:
        if self.stop is None:
            return None
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def token_limit(self) -> int | None:
        return self.max_tokens

    def openai_knobs(self) -> dict[str, Any]:
        """The OpenAI (and vLLM) fields as `SpecGuardConfig` overrides, those set only."""
        knobs = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                 "min_p": self.min_p, "repetition_penalty": self.repetition_penalty,
                 "presence_penalty": self.presence_penalty,
                 "frequency_penalty": self.frequency_penalty,
                 "seed": self.seed, "stop": self.stops(), "max_new_tokens": self.token_limit() or None}
        return {k: v for k, v in knobs.items() if v is not None}

    def problems(self, limits: Limits) -> list[tuple[str, str]]:
        """(field, why) for what exceeds the operator's `limits` or contradicts itself; checked,
        with `unsupported()`, before the request is admitted."""
        bad: list[tuple[str, str]] = []
        if (limit := self.token_limit()) is not None and limits.max_tokens is not None \
                and limit > limits.max_tokens:
            bad.append(("max_tokens", f"max_tokens must be <= {limits.max_tokens} on this server "
                                      "(`specguard serve --max-tokens-cap`)"))
        if not stops_ok(self.stops() or ()):
            bad.append(("stop", f"stop takes 1 to {MAX_STOPS} non-empty strings of at most 256 "
                                "characters"))
        if self.specguard is None:
            return bad
        bad.extend(("specguard", why) for why in self.specguard.problems(limits))
        theirs = self.specguard.knobs()
        for name, value in self.openai_knobs().items():
            if name in theirs and theirs[name] != value:
                top = "max_tokens" if name == "max_new_tokens" else name
                bad.append(("specguard", f"{top} is set twice, as a request field and as "
                                         f"specguard.{name}, to different values; set it once"))
        return bad

    def unsupported(self) -> list[tuple[str, str]]:
        """(field, why) for every field set to something this server cannot do."""
        bad = []
        if self.logit_bias:
            bad.append(("logit_bias", "logit_bias is not supported"))
        if self.stream_options is not None and not self.stream:
            bad.append(("stream_options", "stream_options is only allowed with stream=true"))
        no_ops = {"skip_special_tokens": True, "include_stop_str_in_output": False, "min_tokens": 0,
                  "ignore_eos": False, "spaces_between_special_tokens": True}
        for name, default in no_ops.items():
            if getattr(self, name) not in (None, default):
                bad.append((name, f"{name} is supported at {str(default).lower()} only (what this "
                                  "server does); leave it unset"))
        if self.stream_options is not None and self.stream_options.continuous_usage_stats:
            bad.append(("stream_options", "continuous_usage_stats is not supported; usage comes "
                                          "in the last chunk with include_usage"))
        return bad


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    # any JSON: `checks.tool_choice_problems` takes OpenAI's forms only, with one message
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None  # false: the reply ends with its first call
    response_format: dict[str, Any] | None = None
    # vLLM's: the answer constrained to a choice, a regex, a JSON schema or a grammar
    structured_outputs: dict[str, Any] | None = None
    # vLLM's: extra chat-template variables (e.g. Qwen3's {"enable_thinking": false})
    chat_template_kwargs: Any = None
    max_completion_tokens: int | None = Field(None, ge=1)
    # log-probabilities of the answer's tokens, and the most likely alternatives of each
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # vLLM's (transformers') chat-template flags: unset, a final assistant message is continued
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None
    echo: bool | None = None  # vLLM's: the reply starts with the continued message's text
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    web_search_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    verbosity: str | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        bad = super().unsupported()
        if self.top_logprobs and not self.logprobs:
            bad.append(("top_logprobs", "top_logprobs needs logprobs=true"))
        if self.continue_final_message and self.add_generation_prompt:
            bad.append(("continue_final_message", "continue_final_message and "
                                                  "add_generation_prompt cannot both be true: "
                                                  "continue the final message, or start a new "
                                                  "turn"))
        if self.functions is not None or self.function_call is not None:
            bad.append(("functions", "the legacy functions/function_call fields are not supported; "
                                     "pass the same definitions as tools=[{'type': 'function', "
                                     "'function': {...}}]"))
        if self.modalities not in (None, ["text"]):
            bad.append(("modalities", "only text output is supported"))
        for name in ("audio", "prediction", "reasoning_effort", "web_search_options", "verbosity"):
            if getattr(self, name) is not None:
                bad.append((name, f"{name} is not supported by this server"))
        bad.extend(checks.tool_choice_problems(self.tool_choice, self.tools))
        bad.extend(checks.template_problems(self.chat_template_kwargs))
        bad.extend(checks.format_problems(self.response_format))
        bad.extend(checks.structured_problems(self.structured_outputs, self.response_format))
        return bad

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def continuation(self) -> bool | None:
        return continuation(self.continue_final_message, self.add_generation_prompt)


class CompletionRequest(_Sampling):
    """POST /v1/completions: raw continuation, no chat template. `prompt` is a string, a list of
    token ids, or a list of either (one run per prompt, choices prompt by prompt); `echo` puts
    the prompt before the completion, `logprobs=N` each token's log-probability and its N most
    likely alternatives (the prompt's too with `echo`, from the target's pass over it);
    `max_tokens=0` with `echo` writes nothing (how lm-eval scores a text)."""

    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    max_tokens: int | None = Field(None, ge=0)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool | None = None
    add_special_tokens: bool | None = None  # vLLM's: a text prompt's BOS (true by default)
    suffix: str | None = None
    best_of: int | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        bad = super().unsupported()
        prompts = self.prompts()
        if not prompts or any(not p for p in prompts):
            bad.append(("prompt", "the prompt is empty; send text or at least one token id"))
        elif len(prompts) * self.choices > MAX_RUNS:
            bad.append(("prompt", f"prompts x n is at most {MAX_RUNS} per request (each is one "
                                  "run); send fewer prompts per request"))
        if any(isinstance(p, list) and any(t < 0 for t in p) for p in prompts):
            bad.append(("prompt", "token ids are never negative"))
        if self.max_tokens == 0 and not self.echo:
            bad.append(("max_tokens", "max_tokens=0 writes nothing; it is for scoring the prompt "
                                      "with echo=true (and logprobs)"))
        if self.suffix:
            bad.append(("suffix", "suffix (insertion) is not supported"))
        if self.best_of not in (None, 1):
            bad.append(("best_of", "best_of > 1 is not supported"))
        return bad

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a text or token ids."""
        p = self.prompt
        if isinstance(p, str) or (p and all(isinstance(t, int) for t in p)):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]


ErrorType = Literal["invalid_request_error", "authentication_error", "not_found_error",
                    "server_overloaded", "server_error"]


def error_body(message: str, type_: ErrorType, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
