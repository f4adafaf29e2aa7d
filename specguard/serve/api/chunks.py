"""Engine steps -> OpenAI stream chunks: `StepDeltas` turns committed steps into deltas, the
chunk builders wrap them in the `openai` package's own types (`ChatCompletionChunk`, and
`Completion` as OpenAI streams completions), validated as they are built, and `sse` frames one
event (`wire.dump`). Pure, no I/O."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openai import BaseModel
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import Choice, ChoiceDelta, ChoiceLogprobs
from openai.types.completion_choice import Logprobs

from specguard.serve.api import wire
from specguard.serve.api.convert import openai_tool_call, usage
from specguard.serve.api.untrusted import encodable
from specguard_core.text.logprobs import RunTokens, TokenEntry
from specguard_core.text.steps import StepRules, strip_markers
from specguard_core.types import GenerationResult, StepRecord

_RULES = StepRules()


class StepDeltas:
    """Turns one run's committed steps into deltas whose concatenation equals the final answer:
    the answer is rebuilt as the result builds it (answer steps, cut at the first stop string,
    stripped) and only its settled part is sent, i.e. trailing whitespace and a tail that could
    still become a stop string are held back until the next step or `flush`. Reasoning goes to
    `reasoning` and `reasoning_content` (vLLM's names, now and before); tool calls
    (`ToolCall.shown`: valid ones and those naming a tool) are numbered in order. `raw`: the
    text is every step's, as written (a completion), not the answer. `tokens`: the run's tokens
    with their log-probabilities, released with the text they start in (`logprobs`)."""

    def __init__(self, stops: Sequence[str], raw: bool = False,
                 tokens: RunTokens | None = None) -> None:
        self.stops = tuple(s for s in stops if s)
        self.steps: list[tuple[str, str]] = []  # (kind, text) of every committed step
        self.sent, self.n_calls = "", 0
        self.as_written, self.tokens, self.settled = raw, tokens, 0

    @property
    def raw(self) -> str:
        return "".join(text for _, text in self.steps)

    def _stop_at(self, raw: str) -> int | None:
        hits = [raw.find(s) for s in self.stops if s in raw]
        return min(hits) if hits else None

    def _settled_end(self, raw: str) -> int:
        """End of the text no later step can change: the first stop, else before a tail that is
        the start of a stop string."""
        stop = self._stop_at(raw)
        if stop is not None:
            return stop
        tail = max((n for s in self.stops for n in range(1, len(s)) if raw.endswith(s[:n])),
                   default=0)
        return len(raw) - tail

    def _answer(self, end: int) -> str:
        out, pos = [], 0
        for kind, text in self.steps:
            if kind == "answer":
                out.append(text[:max(0, end - pos)])
            pos += len(text)
        text = "".join(out)  # kept as written right before a stop string, as the result keeps it
        return text.lstrip() if self._stop_at(self.raw) is not None else text.strip()

    def _send(self, text: str) -> dict[str, Any]:
        if not text.startswith(self.sent):  # cannot happen: settled text only grows
            return {}
        new, self.sent = text[len(self.sent):], text
        return {"content": new} if new else {}

    def delta(self, step: StepRecord) -> dict[str, Any]:
        before = self.raw
        self.steps.append((step.kind, step.text))
        if self.tokens is not None:
            self.tokens.add(step)
        self.settled = self._settled_end(self.raw)
        if self.as_written:
            return self._send(self.raw[: self.settled])
        if step.kind == "reasoning":
            full = before + step.text
            cut = self._stop_at(full)
            visible = full[len(before):] if cut is None else full[len(before):max(cut, len(before))]
            reasoning = strip_markers(visible, _RULES)  # vLLM's names, now and before
            return {"reasoning": reasoning, "reasoning_content": reasoning} if reasoning else {}
        if step.kind == "tool_call":
            call = step.tool_call
            if call is None or not call.shown:
                return {}  # no tool name: in the final chunk's specguard.run.invalid_tool_calls
            self.n_calls += 1
            return {"tool_calls": [{"index": self.n_calls - 1,
                                    **openai_tool_call(call).model_dump(exclude_unset=True)}]}
        return self._send(self._answer(self.settled))

    def flush(self, final_text: str) -> dict[str, Any]:
        """The rest of the answer once the run is over (`GenerationResult.text`)."""
        return self._send(final_text)

    def logprobs(self, final: bool = False) -> list[TokenEntry] | None:
        """The tokens whose text settled since the last call (None when none were asked for);
        `final` (the run is over): the rest of them, up to the stop string that cut the text."""
        if self.tokens is None:
            return None
        if not final:
            return self.tokens.take(len(self.raw[: self.settled].encode("utf-8")))
        cut = self._stop_at(self.raw)
        return self.tokens.take(None if cut is None else len(self.raw[:cut].encode("utf-8")))


def _fields(rid: str, obj: str, created: int, model: str, choice: BaseModel,
            trace: dict[str, Any] | None, include_usage: bool) -> dict[str, Any]:
    """A chunk's fields: `usage` null in every chunk but the usage chunk when the client asked
    for it (as OpenAI does), the trace when there is one."""
    out: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model,
                           "choices": [choice]}
    if include_usage:
        out["usage"] = None
    if trace is not None:
        out["specguard"] = trace
    return out


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any],
               finish: str | None = None, trace: dict[str, Any] | None = None,
               include_usage: bool = False, index: int = 0,
               logprobs: list[TokenEntry] | None = None) -> ChatCompletionChunk:
    """A `chat.completion.chunk`; `delta`: `ChoiceDelta`'s fields (and vLLM's reasoning);
    `logprobs`: the tokens of this chunk, as `logprobs.content` (None: none asked for)."""
    lp = None if logprobs is None else ChoiceLogprobs(content=[e.chat() for e in logprobs])
    choice = Choice(index=index, delta=ChoiceDelta(**delta), logprobs=lp, finish_reason=finish)
    return ChatCompletionChunk(**_fields(rid, "chat.completion.chunk", created, model, choice,
                                         trace, include_usage))


def completion_chunk(rid: str, model: str, created: int, text: str, finish: str | None = None,
                     trace: dict[str, Any] | None = None,
                     include_usage: bool = False, index: int = 0,
                     logprobs: Logprobs | None = None) -> Completion:
    """A streamed `text_completion`. OpenAI's `CompletionChoice` requires a finish_reason, which a
    chunk before the last has as null (OpenAI and vLLM send it so, and the SDK reads chunks
    without validating them): the choice is validated as finished, then given the real one.
    `logprobs`: this chunk's tokens (`completions.logprobs_object`)."""
    choice = CompletionChoice(index=index, text=text, logprobs=logprobs,
                              finish_reason=finish or "stop")
    choice.finish_reason = finish  # type: ignore[assignment]
    return Completion(**_fields(rid, "text_completion", created, model, choice, trace,
                                include_usage))


def usage_chunk(rid: str, model: str, created: int, obj: str,
                result: GenerationResult | Sequence[GenerationResult], n: int | None = None
                ) -> ChatCompletionChunk | Completion:
    """The extra last chunk of `stream_options.include_usage`: no choices, the runs' usage (`n`
    runs per prompt: `convert.usage`)."""
    kind = ChatCompletionChunk if obj == "chat.completion.chunk" else Completion
    return kind(id=rid, object=obj, created=created, model=model, choices=[],
                usage=usage(result, n))


def sse(data: wire.Response | dict[str, Any] | str) -> str:
    """One server-sent event (a chunk, `wire.dump`ed; an error object; "[DONE]"), encodable to
    UTF-8 whatever the model wrote (`encodable`)."""
    if isinstance(data, BaseModel):
        data = wire.dump(data)
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {encodable(text)}\n\n"
