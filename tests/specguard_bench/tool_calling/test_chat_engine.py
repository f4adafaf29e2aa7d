"""The baselines' steps are cut as the engine cuts its own: whole tokens."""

from __future__ import annotations

from specguard_bench.tool_calling.chat_engine import _cut, _split_ids
from specguard_core.text.steps import StepRules, segment


class Tokens:
    """A handle whose tokens are the strings of `vocab`."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


def test_a_token_that_spans_the_end_of_a_bare_call_stays_whole() -> None:
    handle = Tokens(['{"name": "add", "arguments": {"a": 1, "b": 2', "}}\n", "Made up."])
    ids = [0, 1, 2]
    rules = StepRules().with_tools(["add"])
    pieces = segment(handle.decode(ids), rules)
    assert pieces[0].endswith("}}")  # the text's own step ends with the JSON
    groups = _split_ids(handle, ids, pieces)
    assert groups[0] == [0, 1]  # the spanning token goes to the call
    assert _cut(handle, ids, pieces, groups, 1) == ['{"name": "add", "arguments": {"a": 1, "b": 2}}\n']


def test_a_cut_on_a_token_boundary_keeps_the_pieces() -> None:
    handle = Tokens(["First.\n\n", '{"name": "add", "arguments": {}}', "\n\nMore."])
    ids = [0, 1, 2]
    rules = StepRules().with_tools(["add"])
    pieces = segment(handle.decode(ids), rules)
    groups = _split_ids(handle, ids, pieces)
    assert _cut(handle, ids, pieces, groups, 2) == pieces[:2]


def test_the_end_of_turn_token_after_a_last_call_is_not_its_text() -> None:
    # the baseline appends the end-of-turn token to the last group; the call's text is still
    # parseable, as the engine's (before, the cut read "```<|im_end|>" and the call was lost)
    handle = Tokens(["```json\n", '{"name": "add", "arguments": {"a": 1, "b": 2}}', "\n```",
                     "<|im_end|>"])
    ids = [0, 1, 2]
    rules = StepRules().with_tools(["add"])
    pieces = segment(handle.decode(ids), rules)
    groups = _split_ids(handle, ids, pieces)
    groups[-1].append(3)
    cut = _cut(handle, ids, pieces, groups, len(pieces))
    assert "".join(cut) == handle.decode(ids)
    assert "<|im_end|>" not in cut[-1]
