"""The OpenAI wire format the server speaks: request bodies (validated) and the error body.

Request models forbid unknown fields, as OpenAI does ("Unrecognized request argument"), so a typo
or a feature this server lacks is a 400 rather than silently ignored. Fields OpenAI defines that
SpecGuard cannot honour are declared and rejected by `unsupported()` when set to anything but their
no-op value; fields that change nothing here (user, metadata, store, ...) are accepted and ignored.
Responses are built as plain dicts in `convert.py` (they are JSON out, not input to validate).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 16  # choices per request (each is a full engine run)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False
    include_obfuscation: bool | None = None  # OpenAI's; nothing to obfuscate here


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
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=MAX_N, description="choices: one engine run each, with "
                          "seeds seed, seed+1, ...")
    logprobs: bool | int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # SpecGuard's own per-request knobs (any SpecGuardConfig field: k, tau, beta, ...), sent by
    # OpenAI clients as `extra_body={"specguard": {...}}`
    specguard: dict[str, Any] | None = None

    @property
    def choices(self) -> int:
        return self.n or 1

    def stops(self) -> tuple[str, ...] | None:
        if self.stop is None:
            return None
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def unsupported(self) -> list[tuple[str, str]]:
        """(field, why) for every field set to something this server cannot do."""
        bad = []
        if self.logprobs not in (None, False, 0) and (self.stream or not isinstance(
                self, ChatCompletionRequest) or self.logprobs is not True):
            bad.append(("logprobs", "logprobs are supported on /v1/chat/completions without "
                                    "stream (logprobs=true, top_logprobs unset or 0); the steps' "
                                    "draft signals are in the `specguard` field of every response"))
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                bad.append((name, f"{name} is not supported; leave it unset or 0"))
        if self.logit_bias:
            bad.append(("logit_bias", "logit_bias is not supported"))
        if self.stream_options is not None and not self.stream:
            bad.append(("stream_options", "stream_options is only allowed with stream=true"))
        return bad


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # calls come one per step; either value is honoured
    response_format: dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    top_logprobs: int | None = None
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
        if self.top_logprobs not in (None, 0):
            bad.append(("top_logprobs", "top_logprobs is not supported"))
        if self.functions is not None or self.function_call is not None:
            bad.append(("functions", "the legacy functions/function_call fields are not supported; "
                                     "pass the same definitions as tools=[{'type': 'function', "
                                     "'function': {...}}]"))
        if self.modalities not in (None, ["text"]):
            bad.append(("modalities", "only text output is supported"))
        for name in ("audio", "prediction", "reasoning_effort", "web_search_options", "verbosity"):
            if getattr(self, name) is not None:
                bad.append((name, f"{name} is not supported by this server"))
        bad.extend(self._tool_choice_problems())
        if self.response_format is not None and \
                self.response_format.get("type") not in ("text", "json_object", "json_schema"):
            bad.append(("response_format", "response_format.type must be text, json_object or "
                                           "json_schema"))
        return bad

    def _tool_choice_problems(self) -> list[tuple[str, str]]:
        choice = self.tool_choice
        usage = ("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', "
                 "'function': {'name': ...}}")
        if isinstance(choice, dict):
            fn = choice.get("function")
            if choice.get("type") != "function" or not isinstance(fn, dict) or \
                    not isinstance(fn.get("name"), str):
                return [("tool_choice", usage)]
        elif choice not in (None, "none", "auto", "required"):
            return [("tool_choice", usage)]
        if choice not in (None, "none", "auto") and not self.tools:
            return [("tool_choice", "tool_choice requires tools; pass the tools to choose from")]
        return []

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """POST /v1/completions. The prompt is sent to the engine as one user message (the engine
    always uses the chat template), so this is a convenience over chat, not raw continuation."""

    prompt: str | list[str]
    suffix: str | None = None
    echo: bool | None = None
    best_of: int | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        bad = super().unsupported()
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            bad.append(("prompt", "send exactly one prompt per request (a string)"))
        if self.suffix:
            bad.append(("suffix", "suffix (insertion) is not supported"))
        if self.echo:
            bad.append(("echo", "echo is not supported"))
        if self.best_of not in (None, 1):
            bad.append(("best_of", "best_of > 1 is not supported"))
        return bad

    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


ErrorType = Literal["invalid_request_error", "authentication_error", "not_found_error",
                    "server_overloaded", "server_error"]


def error_body(message: str, type_: ErrorType, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
