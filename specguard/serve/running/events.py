"""The SSE chunks of one choice of a streamed request (`Events`): its opening, each committed
step's delta and the final one, each with the log-probabilities of its tokens when asked for.

Chat opens with the role (and the continued message's text with vLLM's `echo`); a completion's
first chunk carries the prompt with `echo`, and the prompt's scored tokens with `logprobs`, ahead
of its own text. A completion's tokens carry their offset in the choice's whole text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specguard.serve.api import chunks
from specguard.serve.api.completions import logprobs_object
from specguard_core.text.logprobs import RunTokens, TokenEntry, prompt_tokens

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine


class Events:
    """Chunks of choice `index` (`chat`: a chat completion, else a completion) whose text starts
    with `echo`, with `logprobs` alternatives per token (None: no log-probabilities asked for)."""

    def __init__(self, engine: SpecGuardEngine, rid: str, model: str, created: int,
                 include_usage: bool, index: int, chat: bool, logprobs: int | None,
                 echo: str = "") -> None:
        self.engine, self.rid, self.model, self.created = engine, rid, model, created
        self.include_usage, self.index, self.chat = include_usage, index, chat
        self.logprobs, self.echo = logprobs, echo
        self.offset = 0  # a completion's: where the next token starts in the choice's text
        self.first = not chat  # a completion's first chunk is still to come
        self.stream: GenerationStream | None = None

    def opening(self, stream: GenerationStream) -> list[str]:
        """Chat's role chunk (with the echoed text); a completion sends its echo with its first
        chunk, once the prompt is scored."""
        self.stream = stream
        if not self.chat:
            return []
        return [self.chunk({"role": "assistant", "content": self.echo}, None)]

    def deltas(self, stops: tuple[str, ...]) -> chunks.StepDeltas:
        """The choice's deltas: chat's answer, or a completion's text as written."""
        tokens = None
        if self.logprobs is not None:
            tokens = RunTokens(self.engine.token_text, answer_only=self.chat,
                               with_eos=not self.chat)
        return chunks.StepDeltas(stops, raw=not self.chat, tokens=tokens)

    def chunk(self, delta: dict[str, Any], logprobs: list[TokenEntry] | None,
              finish: str | None = None, trace: dict[str, Any] | None = None) -> str:
        """One SSE event: `delta` (chat's fields; a completion's `content`) and its tokens."""
        if self.chat:
            return chunks.sse(chunks.chat_chunk(self.rid, self.model, self.created, delta, finish,
                                                trace, self.include_usage, self.index, logprobs))
        text = delta.get("content", "")
        if self.first:  # the prompt goes first
            text, logprobs, self.first = self.echo + text, self._prompt(logprobs), False
        lp = None
        if logprobs is not None and self.logprobs is not None:
            lp = logprobs_object(logprobs, self.offset, self.logprobs)
            self.offset += sum(len(e.token) for e in logprobs if not e.eos)
        return chunks.sse(chunks.completion_chunk(self.rid, self.model, self.created, text,
                                                  finish, trace, self.include_usage, self.index,
                                                  lp))

    def _prompt(self, entries: list[TokenEntry] | None) -> list[TokenEntry] | None:
        """The prompt's scored tokens ahead of `entries` (with echo and logprobs)."""
        scored = self.stream.prompt_logprobs if self.stream is not None else None
        if entries is None or scored is None or not self.echo:
            return entries
        return prompt_tokens(scored, self.engine.token_text) + entries
