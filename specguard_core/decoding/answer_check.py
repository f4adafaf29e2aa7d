"""The check-only path of a JSON response format (`response_format_mode="check"`): whether the
answer text so far is on its way to one JSON object that matches the format.

Each draft answer step is checked (the verifier's structural check) and one that breaks the
format goes to the target. Whether the text can still become one JSON object is the grammar's
question (`reply_grammar.check_grammar`: llguidance over the text's UTF-8 bytes, one token per
byte, so it needs no model's tokenizer and holds for a served target or a heterogeneous pair
alike): prose, a value that is not an object and text after the object fail at the byte where
they start; JSON cut off at the end of a step does not. Once the object is whole it is validated
against the schema (`text.schema.validator`, patterns matched in bounded time). The schema is
not compiled into this grammar: llguidance fixes the order of an object's properties, and a
checked answer may give them in any order.
"""

from __future__ import annotations

import threading
from typing import Any

import jsonschema

from specguard_core.decoding.grammar import Grammar
from specguard_core.decoding.reply_grammar import check_grammar
from specguard_core.text.errors import FREE_TEXT_LIMIT, quoted
from specguard_core.text.formats import ResponseFormat, final_text
from specguard_core.text.schema import json_problem, loads_untrusted, validator

_BYTES = 256  # token b is byte b; token 256 ends the text
_lock = threading.Lock()
_index: list[Any] = []  # the byte tokenizer, built on first use


def byte_index() -> Any:
    """llguidance's tokenizer whose token b is byte b (and 256 the end), built once."""
    with _lock:
        if not _index:
            import llguidance
            from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            alphabet = bytes_to_unicode()  # the ByteLevel pre-tokenizer's byte characters
            vocab = {alphabet[b]: b for b in range(_BYTES)}
            tok = Tokenizer(models.BPE(vocab={**vocab, "<end>": _BYTES}, merges=[]))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
            tok.decoder = decoders.ByteLevel()
            tok.add_special_tokens([AddedToken("<end>", special=True)])
            _index.append(llguidance.LLTokenizer(tok.to_str(), n_vocab=_BYTES + 1,
                                                 eos_token=_BYTES))
        return _index[0]


class AnswerCheck:
    """`check(answer, done)`: why the answer text so far breaks the JSON format, or None. One per
    request (its matcher follows the answer as it grows)."""

    def __init__(self, fmt: ResponseFormat) -> None:
        import llguidance

        self.fmt = fmt
        matcher = llguidance.LLMatcher(byte_index(), check_grammar())
        assert not matcher.is_error(), matcher.get_error()
        self.grammar = Grammar(matcher, 0, _BYTES + 1)
        self.what = "one JSON object matching its schema" if fmt.schema is not None \
            else "one JSON object"

    def __call__(self, answer: str, done: bool) -> str | None:
        data = list(answer.encode("utf-8", "replace"))
        ok = self.grammar.valid_prefix(data)
        if ok < len(data):
            rest = bytes(data[ok:]).decode("utf-8", "replace")
            return f"response_format asks for {self.what}; the answer breaks it at {quoted(rest)}"
        if self.grammar.accepts(data):  # the object is whole
            return self._schema_problem(answer)
        if not done:
            return None
        if not answer.strip():
            return f"response_format asks for {self.what}, got no answer"
        return f"response_format asks for {self.what}; the answer ends before it is whole"

    def _schema_problem(self, answer: str) -> str | None:
        """Why the finished answer's object breaks the whole schema, or None."""
        try:
            value = loads_untrusted(final_text(answer, self.fmt))
        except (ValueError, RecursionError):
            return f"response_format asks for {self.what}; the answer is not JSON"
        if (problem := json_problem(value)) is not None:
            return f"response_format asks for {self.what}; the answer's JSON: {problem}"
        if self.fmt.schema is None:
            return None
        try:
            validator(self.fmt.schema).validate(value)
        except jsonschema.ValidationError as err:
            why = err.message if len(err.message) <= FREE_TEXT_LIMIT else \
                err.message[:FREE_TEXT_LIMIT] + "..."
            return f"answer does not match the response_format schema: {why}"
        return None
