"""Log-probabilities as OpenAI reports them: a run's tokens (and its prompt's) with their text,
bytes, log-probability and most likely alternatives, in the order of the text.

`RunTokens` takes a run's steps as they are committed and releases each token once the text it
starts in is settled (streaming: a tail that may still become a stop string waits), or all at the
end; the entries of a stream, joined, are the entries of the whole run. `answer_logprobs` is the
whole run's answer at once (chat's `logprobs.content`); `prompt_tokens` the prompt's tokens as
the target scored them (completions' `echo`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specguard_core.types import (
    LOGPROB_FLOOR,
    GenerationResult,
    PromptLogprobs,
    StepRecord,
    StepSource,
)

# a token of the model `source` names -> (its text, its own bytes); None for an end-of-turn token
# unless the flag asks for its text (`SpecGuardEngine.token_text`)
Decode = Callable[[StepSource, int, bool], tuple[str, bytes] | None]


def finite(logprob: float) -> float:
    """A log-probability JSON can carry: -inf (an underflow) as vLLM's `LOGPROB_FLOOR`."""
    return logprob if math.isfinite(logprob) else LOGPROB_FLOOR


@dataclass(frozen=True)
class TokenEntry:
    """One token: its text and bytes, its log-probability (None: no model chose it, e.g. the
    prompt's first token), the alternatives as (text, bytes, log-probability), most likely first,
    and whether it ends the turn (an EOS, which is not part of the text)."""

    token: str
    raw: bytes
    logprob: float | None
    top: tuple[tuple[str, bytes, float], ...] = ()
    eos: bool = False

    def chat(self) -> dict[str, Any]:
        """OpenAI's `logprobs.content` entry (the token's own log-probability is never None
        here: forced tokens are left out)."""
        return {"token": self.token, "logprob": finite(self.logprob or 0.0),
                "bytes": list(self.raw),
                "top_logprobs": [{"token": t, "logprob": finite(lp), "bytes": list(b)}
                                 for t, b, lp in self.top]}


def _alternatives(decode: Decode, source: StepSource, top: list[tuple[int, float]]
                  ) -> tuple[tuple[str, bytes, float], ...]:
    out = []
    for tok, lp in top:
        piece = decode(source, tok, True)
        if piece is not None:
            out.append((piece[0], piece[1], lp))
    return tuple(out)


class RunTokens:
    """A run's tokens in text order, released as the text they start in settles. `answer_only`:
    the answer steps' tokens only (chat), else every step's (completions); `with_eos`: an EOS the
    run ended with is an entry too (completions, as vLLM lists it), else left out. Tokens no model
    chose (a forced tool-call prefix) are left out."""

    def __init__(self, decode: Decode, *, answer_only: bool = True, with_eos: bool = False
                 ) -> None:
        self.decode, self.answer_only, self.with_eos = decode, answer_only, with_eos
        self._held: list[tuple[int, TokenEntry]] = []  # (byte where the token starts, entry)
        self._pos = 0  # bytes of the run's text so far

    def add(self, step: StepRecord) -> None:
        """Take one committed step's tokens."""
        at = self._pos
        self._pos += len(step.text.encode("utf-8"))
        if self.answer_only and step.kind != "answer":
            return
        tops = step.top_logprobs
        for i, (tok, lp) in enumerate(zip(step.token_ids, step.token_logprobs, strict=False)):
            piece = self.decode(step.source, tok, False)
            eos = piece is None
            if eos and self.with_eos:
                piece = self.decode(step.source, tok, True)
            if piece is None:
                continue
            token, raw = piece
            if lp is not None:
                top = _alternatives(self.decode, step.source, tops[i]) if i < len(tops) else ()
                self._held.append((at, TokenEntry(token, b"" if eos else raw, lp, top, eos)))
            at += 0 if eos else len(raw)

    def take(self, cut: int | None = None) -> list[TokenEntry]:
        """The held tokens that start before byte `cut` of the run's text (all when None)."""
        n = len(self._held) if cut is None else next(
            (i for i, (at, _) in enumerate(self._held) if at >= cut), len(self._held))
        out, self._held = [e for _, e in self._held[:n]], self._held[n:]
        return out


def answer_logprobs(result: GenerationResult, decode: Decode) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content` entries for a finished run's answer: each token of its answer
    steps up to the first stop string (`raw_text` ends there), with its log-probability and
    alternatives (`StepRecord.token_logprobs`, `top_logprobs`); -inf as `LOGPROB_FLOOR`; an EOS
    and forced tokens are left out."""
    tokens = RunTokens(decode)
    for step in result.steps:
        tokens.add(step)
    return [e.chat() for e in tokens.take(len(result.raw_text.encode("utf-8")))]


def prompt_tokens(scored: PromptLogprobs, decode: Decode) -> list[TokenEntry]:
    """The prompt's tokens as the target scored them (special tokens as their text)."""
    out = []
    for i, tok in enumerate(scored.token_ids):
        piece = decode("target", tok, True) or ("", b"")
        top = _alternatives(decode, "target", scored.top[i]) if i < len(scored.top) else ()
        out.append(TokenEntry(piece[0], piece[1], scored.logprobs[i], top))
    return out
