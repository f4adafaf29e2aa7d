"""Constrained decoding: a grammar as a token mask over the vocabulary (llguidance).

A constrained response format (`json_object` and every `json_schema` by default, a structured
output; `decoding/reply_grammar.py`) and owed or strict tool calls (`decoding/tool_grammar.py`)
constrain every token of the reply: the draft samples, the target's check judges and the target's
fallback writes only tokens the grammar allows, so the answer is, say, JSON that matches the
schema by construction (no fence, no prose, no cut-off but the token budget's).

- `GrammarIndex`: one per engine, the tokenizer's index for llguidance (built on first use, about
  3 s for a 150k vocabulary; `benchmarks/notes/2026-12-02-constrained-decoding-cost.md`).
- `Grammar`: one per request, the schema's matcher. `allowed(seq)` is the mask after the reply's
  tokens `seq` as a pure function of them: the matcher rolls back to the longest prefix it shares
  with `seq` and consumes the rest, so every caller (k forked draft rows, the target's check over
  a draft run, the fallback) asks about its own sequence and a rolled-back KV cache needs no
  matching rollback here. Masks are cached per sequence (a check reuses the draft's).

The mask is applied with the request's other logits shaping (`sampling.Shaping.penalise`), so the
acceptance rules see the target's distribution renormalised over the allowed tokens: with
`acceptance="exact"` the reply is the target's own constrained greedy text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

_CACHED_MASKS = 512  # packed masks kept per request (V/32 int32 each: ~19 KB for 150k tokens)


class GrammarIndex:
    """The tokenizer's llguidance index, built once on first use (thread-safe)."""

    def __init__(self, tokenizer: Any, eos_ids: Sequence[int], vocab_size: int) -> None:
        self.tokenizer, self.eos_ids, self.vocab_size = tokenizer, sorted(set(eos_ids)), vocab_size
        self._index: Any = None
        self._lock = threading.Lock()

    def index(self) -> Any:
        """The llguidance tokenizer; a ValueError when this tokenizer cannot be indexed."""
        with self._lock:
            if self._index is None:
                import llguidance.hf

                try:
                    self._index = llguidance.hf.from_tokenizer(
                        self.tokenizer, n_vocab=self.vocab_size, eos_token=self.eos_ids)
                except ValueError as err:
                    raise ValueError(f"constrained decoding cannot index this tokenizer "
                                     f"(llguidance: {err})") from None
            return self._index

    def for_schema(self, schema: dict[str, Any] | None, start: int) -> Grammar:
        """A request's grammar for `schema` (None: any JSON object); its reply starts at token
        position `start`. A schema llguidance cannot compile is a ValueError naming why."""
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema if schema is not None else {"type": "object"})
        return self.for_grammar(grammar, start, "the response_format schema")

    def for_lark(self, lark: str, start: int, what: str) -> Grammar:
        """A request's grammar for the Lark grammar `lark` (llguidance's dialect, `%json`
        included) over the reply from token `start`; ValueError naming `what` when it cannot be
        compiled."""
        import llguidance

        return self.for_grammar(llguidance.grammar_from("lark", lark), start, what)

    def for_grammar(self, grammar: str, start: int, what: str,
                    fix: str = "simplify it") -> Grammar:
        """A request's grammar for llguidance's grammar text `grammar` (Lark, or its JSON form
        with named grammars) over the reply from token `start`; a ValueError naming `what` and
        saying `fix` when it cannot be compiled."""
        import llguidance

        try:
            index = self.index()
        except ValueError as err:
            raise ValueError(f"{what} cannot be enforced: {err}; {fix}") from None
        matcher = llguidance.LLMatcher(index, grammar)
        if matcher.is_error():
            raise ValueError(f"{what} cannot be enforced: {matcher.get_error()}; {fix}")
        return Grammar(matcher, start, self.vocab_size)


class Grammar:
    """One request's matcher: token masks for its reply's sequences (see the module's text)."""

    def __init__(self, matcher: Any, start: int, vocab_size: int) -> None:
        self.matcher, self.start, self.vocab_size = matcher, start, vocab_size
        self._consumed: list[int] = []  # the reply tokens the matcher stands after
        self._masks: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self._all = torch.full(((vocab_size + 31) // 32,), -1, dtype=torch.int32)  # every token

    def allowed(self, seq: Sequence[int]) -> torch.Tensor | None:
        """`[V]` bool: the tokens the grammar allows after reply tokens `seq`; None when `seq`
        itself breaks the grammar (no token then counts as allowed or not: a caller judging such
        a sequence has refused it at its first breaking token already)."""
        packed = self._packed(seq)
        return None if packed is None else _unpack(packed[None], self.vocab_size)[0]

    def valid_prefix(self, seq: Sequence[int]) -> int:
        """How many leading tokens of reply tokens `seq` the grammar allows."""
        if self._seek(tuple(seq)):
            return len(seq)
        done = len(self._consumed)  # the matcher stands after the prefix it shares with `seq`
        return done + int(self.matcher.validate_tokens(list(seq[done:])))

    def accepts(self, seq: Sequence[int]) -> bool:
        """Whether the reply may end after reply tokens `seq` (they make a whole text of it)."""
        return self._seek(tuple(seq)) and bool(self.matcher.is_accepting())

    def mask(self, logits: torch.Tensor, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        """`logits: [N, V']` with row i after full sequence `seqs[i]` (prompt included) ->
        `[N, V']`, tokens the grammar forbids at -inf (a copy; rows whose sequence breaks the
        grammar unchanged). A model whose logits are wider than the vocabulary (padded lm_head)
        gets its padding forbidden."""
        rows = [self._packed(seq[self.start:]) for seq in seqs]
        packed = torch.stack([self._all if r is None else r for r in rows])  # [N, ceil(V / 32)]
        ok = _unpack(packed, logits.shape[-1])  # [N, V']
        return logits.masked_fill(~ok.to(logits.device), float("-inf"))

    def _packed(self, seq: Sequence[int]) -> torch.Tensor | None:
        """The packed mask (`[ceil(V / 32)]` int32) after reply tokens `seq`; None when `seq`
        breaks the grammar."""
        key = tuple(seq)
        packed = self._masks.get(key)
        if packed is not None:
            self._masks.move_to_end(key)
            return packed
        if not self._seek(key):
            return None
        import llguidance.torch as lt

        packed = lt.allocate_token_bitmask(1, self.vocab_size)
        lt.fill_next_token_bitmask(self.matcher, packed, 0)
        self._masks[key] = packed[0]
        if len(self._masks) > _CACHED_MASKS:
            self._masks.popitem(last=False)
        return packed[0]

    def _seek(self, key: tuple[int, ...]) -> bool:
        """Move the matcher to stand after `key`; False (matcher where it was) when `key` breaks
        the grammar."""
        done = self._consumed
        common = 0
        for a, b in zip(done, key, strict=False):
            if a != b:
                break
            common += 1
        if common < len(done):
            self.matcher.rollback(len(done) - common)
            del done[common:]
        rest = list(key[common:])
        if not rest:
            return True
        if self.matcher.validate_tokens(rest) < len(rest):
            return False
        assert self.matcher.consume_tokens(rest), self.matcher.get_error()
        done.extend(rest)
        return True


_SHIFTS = torch.arange(32, dtype=torch.int32)  # [32]


def _unpack(packed: torch.Tensor, width: int) -> torch.Tensor:
    """`[N, W]` int32 bitmasks (bit b of word w: token 32 w + b) -> `[N, width]` bool (tokens past
    32 W: False)."""
    bits = ((packed[:, :, None] >> _SHIFTS) & 1).bool().reshape(packed.shape[0], -1)  # [N, 32 W]
    if bits.shape[1] >= width:
        return bits[:, :width]
    return torch.nn.functional.pad(bits, (0, width - bits.shape[1]))
