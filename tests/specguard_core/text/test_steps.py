"""Step segmentation: re-joining gives the text back; tool-call blocks are never split."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from specguard_core.text.steps import StepRules, segment, step_end, step_kind

RULES = StepRules()
BARE = RULES.with_tools(["a", "b", "f", "x"])
pieces = st.sampled_from(["\n\n", "\n", " ", "a", "Step 1.", "<think>", "</think>", "<tool_call>",
                          "</tool_call>", "{", "}", '"', "x\n\ny", '{"name": ', "```json\n", "```"])
texts = st.lists(pieces, max_size=30).map("".join) | st.text(max_size=80)


def tool_block(payload: str) -> str:
    args = json.dumps({"note": payload})
    return f'<tool_call>\n{{"name": "f", "arguments": {args}}}\n</tool_call>'


@given(texts, st.sampled_from([RULES, BARE]))
@settings(max_examples=400, deadline=None)
def test_segment_then_join_is_identity(text: str, rules: StepRules) -> None:
    assert "".join(segment(text, rules)) == text


def test_bare_json_calls_are_whole_steps_when_tools_are_offered() -> None:
    one = '{"name": "a", "arguments": {"x": "p\n\nq"}}'
    two = '```json\n{"name": "b", "arguments": {}}\n```'
    text = one + "\n" + two + "\n\nDone."
    steps = segment(text, BARE)
    assert steps == [one, "\n" + two, "\n\nDone."]
    assert [step_kind(s, False, BARE)[0] for s in steps] == ["tool_call", "tool_call", "answer"]
    # without tools offered, JSON is prose: the delimiter inside it splits it
    assert segment(text, RULES)[0] == '{"name": "a", "arguments": {"x": "p\n\n'
    assert step_kind(one, False, RULES)[0] == "answer"


@given(st.text(max_size=40), st.text(alphabet=st.sampled_from("ab \n\n{}\""), max_size=30),
       st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_tool_call_block_is_one_whole_step(before: str, payload: str, after: str) -> None:
    before = before.replace("<", "")  # keep markers out of the surrounding prose
    after = after.replace("<", "")
    block = tool_block(payload + "\n\n")  # the delimiter inside the JSON must not split it
    text = before + block + after
    steps = segment(text, RULES)
    assert "".join(steps) == text
    holding = [s for s in steps if "<tool_call>" in s]
    assert len(holding) == 1
    step = holding[0]
    assert step.strip() == block, "never merged with prose, never split"


def test_step_end_streaming_is_monotone() -> None:
    text = "Let me think.\n\nNow call:<tool_call>\n{\"a\": \"\n\n\"}\n</tool_call>\n\nBye"
    ends = [step_end(text[:i], RULES) for i in range(len(text) + 1)]
    first = next(e for e in ends if e is not None)
    assert first == len("Let me think.\n\n")
    assert all(e == first for e in ends if e is not None)


def test_kinds() -> None:
    kind, open_ = step_kind("<think>hmm\n\n", False, RULES)
    assert (kind, open_) == ("reasoning", True)
    assert step_kind("done</think>", True, RULES) == ("reasoning", False)
    assert step_kind("The answer is 4.", False, RULES) == ("answer", False)
    assert step_kind("<tool_call>{}</tool_call>", False, RULES)[0] == "tool_call"


def test_rules_follow_the_tokenizer() -> None:
    class NoTools:
        chat_template = "{{ messages }}"

        def get_vocab(self) -> dict[str, int]:
            return {"a": 0}

    rules = StepRules.for_tokenizer(NoTools(), ("\n\n",))
    assert rules.tool_open is None
    assert segment("a<tool_call>b\n\nc", rules) == ["a<tool_call>b\n\n", "c"]


def test_a_forgotten_closer_ends_the_block_with_its_json() -> None:
    call = '<tool_call>\n{"name": "f", "arguments": {"x": "a\\n\\nb"}}'
    text = call + "\nThe tool will tell us.\n\nDone."
    assert segment(text, RULES) == [call, "\nThe tool will tell us.\n\n", "Done."]
    assert step_kind(call, False, RULES)[0] == "tool_call"
    # streamed: open while the JSON is incomplete or a closer may still be coming
    for partial in (call[:-1], call, call + "\n", call + "\n</tool", call + " </tool_call"):
        assert step_end(partial, RULES) is None, partial
    assert step_end(call + "\n</tool_call>", RULES) == len(call) + len("\n</tool_call>")
    assert step_end(call + "\nT", RULES) == len(call)


def test_bare_json_is_a_call_only_when_it_names_an_offered_tool() -> None:
    rules = RULES.with_tools(["get_weather"])
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    answer = '{"name": "Bob", "age": 42}'
    assert step_kind(call, False, rules)[0] == "tool_call"
    assert step_kind(answer, False, rules)[0] == "answer"
    # JSON naming no offered tool is prose: it ends at a delimiter, not where the object ends
    assert segment(answer + " is Bob.\n\nNext", rules) == [answer + " is Bob.\n\n", "Next"]
    assert step_end('{"name": "get_wea', rules) is None  # could still become a call: open
    assert step_end('{"name": "Bo\n\n', rules) == len('{"name": "Bo\n\n')  # cannot: prose
    assert step_kind(call, False, RULES)[0] == "answer"  # no tools offered
