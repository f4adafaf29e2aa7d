"""One step's tokens and text as they arrive, and where the step ends (`StepText`): at a step
boundary of `steps.step_end`, at EOS, or at the token budget, always on a whole character. A step
that opens a tool call is not cut by the step budget: it runs to its closer, or to the request's
own limits (`call_tokens`: `max_new_tokens` left, the context window).

Shared by everything that writes a step: the proposer (draft and target), the speculative
fallback and a served target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from specguard_core.text.steps import StepRules, opens_call, step_end

if TYPE_CHECKING:
    from specguard_core.cache.state import Target

EndReason = Literal["boundary", "eos", "budget", "refused"]  # refused: a watcher stopped it early
Added = Literal["fed", "eos", "before"]
# A UTF-8 character is at most 4 bytes, so a step whose budget ends inside its first character
# needs at most 3 more byte-level tokens to hold it whole.
WHOLE_CHAR_GRACE = 3


class StepText:
    """One step's tokens and text as tokens arrive; decides where the step ends.

    Text grows through `tokenizers`' `DecodeStream` when the tokenizer is fast (a full re-decode per
    token otherwise), so a multi-byte character split over tokens appears whole. A step ends on a
    whole character: cut by the budget in the middle of one, it is trimmed back to the last whole
    character (`trim`); when that character is the step's first, the step instead goes on for up
    to `grace` more tokens to complete it (bytes that form no character by then are kept, their
    text decoded with U+FFFD, so a step is never empty). A step whose text opens a tool call
    (`steps.opens_call`) may take up to `call_tokens` tokens instead of `max_tokens` (when more):
    a call cut short is no call."""

    def __init__(self, handle: Target, rules: StepRules, max_tokens: int, prior: str = "",
                 grace: int = 0, call_tokens: int = 0) -> None:
        self.handle, self.rules, self.max_tokens, self.prior = handle, rules, max_tokens, prior
        self.grace, self.call_tokens = grace, call_tokens
        self.in_call = opens_call(prior, rules)  # the step opens a tool call: `call_tokens` apply
        self.token_ids: list[int] = []
        self.text = ""
        self.end: EndReason | None = None
        self.n_whole = 0  # tokens up to the last whole character
        backend = getattr(handle.tokenizer, "_tokenizer", None)
        self._backend: Any = backend
        self._stream: Any = None
        if backend is not None:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=False)

    def _grow(self, tok: int) -> tuple[str, bool]:
        """(text with `tok`, whether it ends on a whole character)."""
        if self._stream is not None:
            chunk = self._stream.step(self._backend, tok)
            return self.text + (chunk or ""), chunk is not None
        text = self.handle.decode(self.token_ids + [tok])
        return text, not text.endswith("\ufffd")

    def add(self, tok: int) -> Added:
        """Add the next token: "fed" (it belongs to the step and must go through the model), "eos"
        (it ends the turn; never fed) or "before" (the step ended just before it; not added)."""
        if tok in self.handle.eos_ids:
            if self.n_whole < len(self.token_ids):  # bytes of a character the model never ended
                self.text += self.handle.decode(self.token_ids[self.n_whole:])  # U+FFFD, as
                # a whole decode shows them
            self.token_ids.append(tok)
            self.end = "eos"
            return "eos"
        text, whole = self._grow(tok)
        end = step_end(self.prior + text, self.rules) if whole else None
        if end is not None and end - len(self.prior) <= len(self.text) and self.token_ids:
            self.end = "boundary"  # the token opens a block after prose
            return "before"
        self.token_ids.append(tok)
        self.text = text
        if whole:
            self.n_whole = len(self.token_ids)
            self.in_call = opens_call(self.prior + text, self.rules)
        if end is not None:
            self.end = "boundary"
        elif self.room() == 0:
            self.end = "budget"
        return "fed"

    def room(self) -> int:
        """Tokens the step may still take: up to `max_tokens`, or up to `grace` past it while the
        step has not one whole character, or up to `call_tokens` while it opens a tool call."""
        limit = self.max_tokens
        if not self.n_whole and len(self.token_ids) >= self.max_tokens > 0:
            limit += self.grace
        if self.in_call:
            limit = max(limit, self.call_tokens)
        return max(0, limit - len(self.token_ids))

    def trim(self) -> int:
        """Drop trailing tokens of an unfinished character (after a budget cut); returns how many.
        A step with no whole character keeps its tokens, its text their decoding (with U+FFFD)."""
        if self.end == "eos":
            return 0
        if not self.n_whole:
            if self.token_ids and not self.text:
                self.text = self.handle.decode(self.token_ids)
            return 0
        extra = len(self.token_ids) - self.n_whole
        if extra:
            del self.token_ids[self.n_whole:]
        return extra
