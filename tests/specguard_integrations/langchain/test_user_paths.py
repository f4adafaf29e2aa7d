"""What LangChain users hit first, one regression test per item, on scripted engines:
JSON answers are not tool calls, constructor arguments are never dropped, structured output is
verified, `profile`, `parallel_tool_calls=False`, loader options, offline token counting."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from specguard_core import LoadOptions, SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from specguard_integrations.langchain import ChatSpecGuard
from tests.fixtures import record_stream_configs

CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=200)
BOB = '{"name": "Bob", "age": 42}'


class Person(BaseModel):
    """A person."""

    name: str
    age: int


@tool
def lookup_age(person: str) -> int:
    """The age of a person."""
    return 42 if person == "Bob" else 0


def _turns(prompt: str) -> list[tuple[str, str]]:
    return re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", prompt, re.DOTALL)


def _agent_script(sloppy: bool):  # type: ignore[no-untyped-def]
    """Calls lookup_age first; after the result answers JSON (the sloppy draft leaves out the
    required `age`)."""
    def respond(prompt: str) -> str:
        if "<tool_response>" in prompt:
            return '{"name": "Bob"}' if sloppy else BOB
        if "<tools>" in prompt:
            return '<tool_call>\n{"name": "lookup_age", "arguments": {"person": "Bob"}}\n' \
                   "</tool_call>"
        return BOB
    return respond


# ---- item 1: a JSON answer with a "name" key is not a tool call --------------------------------
def test_a_json_answer_naming_no_offered_tool_is_an_answer() -> None:
    engine = scripted_engine(lambda p: BOB, config=CFG)
    message = ChatSpecGuard(engine=engine).bind_tools([lookup_age]).invoke("Who is Bob?")
    assert json.loads(str(message.content)) == {"name": "Bob", "age": 42}
    assert message.tool_calls == [] and message.invalid_tool_calls == []
    assert message.response_metadata["specguard_steps"][0]["kind"] == "answer"


def test_a_bare_json_call_of_an_offered_tool_is_still_a_call() -> None:
    call = '{"name": "lookup_age", "arguments": {"person": "Bob"}}'
    engine = scripted_engine(lambda p: call, config=CFG)
    message = ChatSpecGuard(engine=engine).bind_tools([lookup_age]).invoke("How old is Bob?")
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("lookup_age",
                                                                     {"person": "Bob"})]


def test_no_bare_call_while_a_response_format_is_active() -> None:
    # even JSON naming an offered tool is the answer when a response format asks for JSON
    reply = '{"name": "lookup_age", "arguments": {"person": "Bob"}}'
    engine = scripted_engine(lambda p: reply, config=CFG)
    out = engine.generate("Describe the call as JSON.", tools=[{"type": "function", "function": {
        "name": "lookup_age", "parameters": {"type": "object", "properties": {}}}}],
        response_format="json")
    assert out.tool_calls == [] and out.invalid_tool_calls == []
    assert json.loads(out.text)["name"] == "lookup_age"


# ---- item 2: no constructor argument is dropped -------------------------------------------------
def test_unknown_constructor_arguments_are_errors_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['top_a'\].*max_tokens"):
        ChatSpecGuard(top_a=5)
    with pytest.raises(ValueError, match=r"fallback: pass config=SpecGuardConfig"):
        ChatSpecGuard(fallback="sample")


def test_sampling_knobs_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """top_k, min_p, repetition_penalty: constructor fields and per-call keywords (
    self-hosting); a bad value fails at construction with the field named."""
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    seen = record_stream_configs(engine, monkeypatch)
    model = ChatSpecGuard(engine=engine, top_k=40, min_p=0.05, repetition_penalty=1.1)
    model.invoke("Hello")
    model.invoke("Hello", top_k=3, repetition_penalty=1.3)
    assert [(c.top_k, c.min_p, c.repetition_penalty) for c in seen] == [(40, 0.05, 1.1),
                                                                          (3, 0.05, 1.3)]
    assert ChatSpecGuard(engine=engine)._config(engine, {}).repetition_penalty == 1.0
    with pytest.raises(ValueError, match="min_p"):
        ChatSpecGuard(engine=engine, min_p=2.0)
    with pytest.raises(ValueError, match="repetition_penalty"):
        ChatSpecGuard(engine=engine, repetition_penalty=0)


def test_logprobs_in_chat_openais_metadata_shape() -> None:
    engine = scripted_engine(lambda p: "First.\n\nThe answer is 42.", config=CFG)
    plain = ChatSpecGuard(engine=engine)
    assert "logprobs" not in plain.invoke("Hello").response_metadata
    for model in (ChatSpecGuard(engine=engine, logprobs=True), plain.bind(logprobs=True)):
        message = model.invoke("Hello")
        content = message.response_metadata["logprobs"]["content"]
        assert "".join(t["token"] for t in content).strip() == message.content
        assert all(t["logprob"] <= 0 and t["top_logprobs"] == [] for t in content)
    chunks = list(plain.stream("Hello", logprobs=True))
    assert chunks[-1].response_metadata["logprobs"]["content"] == content
    result = engine.generate("Hello")
    assert [t["logprob"] for t in content] == [  # each step's own values, answer tokens only
        lp for s in result.steps for tok, lp in zip(s.token_ids, s.token_logprobs, strict=True)
        if tok not in engine.target.eos_ids]
    for model in (ChatSpecGuard(engine=engine, logprobs=True, top_logprobs=2),
                  plain.bind(logprobs=True, top_logprobs=2)):
        top = model.invoke("Hello").response_metadata["logprobs"]["content"]
        assert [t["logprob"] for t in top] == [t["logprob"] for t in content]
        assert all(len(t["top_logprobs"]) == 2 and t["top_logprobs"][0]["token"] == t["token"]
                   and t["top_logprobs"][1]["logprob"] <= t["logprob"] for t in top)
    assert "logprobs" not in plain.invoke("Hello", top_logprobs=2).response_metadata


def test_api_key_is_accepted_and_ignored_base_url_is_refused() -> None:
    """Code written for ChatOpenAI-like models switches by changing the class."""
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    model = ChatSpecGuard(engine=engine, api_key="sk-secret-123")
    assert model.invoke("Hello").content == "Hi."
    assert "sk-secret-123" not in repr(model) and "api_key" not in model.model_dump()
    with pytest.raises(ValueError, match=r"\['base_url'\].*ChatOpenAI"):
        ChatSpecGuard(engine=engine, base_url="http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['api_secret'\]"):
        ChatSpecGuard(engine=engine, api_secret="x")


def test_old_argument_names_are_errors_that_name_the_new_ones() -> None:
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    with pytest.raises(ValueError, match=re.escape("['max_new_tokens'] (max_new_tokens: use "
                                                   "max_tokens=)")):
        ChatSpecGuard(engine=engine, max_new_tokens=7)
    with pytest.raises(ValueError, match=re.escape("['draft_model']")):
        ChatSpecGuard(draft_model="org/d", target="org/t")
    with pytest.raises(ValueError, match=re.escape("['model_kwargs']")):
        ChatSpecGuard(engine=engine, model_kwargs={"max_step_tokens": 9})
    assert not hasattr(ChatSpecGuard(engine=engine), "get_engine")


def test_draft_target_and_loader_options_reach_the_loader(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def fake(cls: type, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        seen.append((draft, target, kwargs))
        return scripted_engine(lambda p: "Hi.", config=CFG)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current names warn about nothing
        model = ChatSpecGuard(draft="org/d", target="org/t", device_map="auto",
                              max_memory={0: "10GiB"}, revision="main", dtype="bfloat16",
                              preset="paper", draft_dtype="float32", draft_device="cpu")
    assert model.model == "org/t" and model.target == "org/t" and seen == []
    model.invoke("Hello")
    ((draft, target, kwargs),) = seen
    assert (draft, target) == ("org/d", "org/t")
    load = kwargs["load"]
    assert {k: getattr(load, k) for k in ("device_map", "max_memory", "revision", "dtype",
                                          "trust_remote_code", "draft_dtype", "draft_device",
                                          "target_dtype", "target_device")} == {
        "device_map": "auto", "max_memory": {0: "10GiB"}, "revision": "main",
        "dtype": "bfloat16", "trust_remote_code": False, "draft_dtype": "float32",
        "draft_device": "cpu", "target_dtype": None, "target_device": None}
    assert "config" not in kwargs  # a loaded pair is shared: each model's config is its own
    assert model._config(model.engine, {}).k == 16  # the preset
    # the same options as one LoadOptions are the same loader options: the pair loaded above
    one = ChatSpecGuard(draft="org/d", target="org/t", preset="paper",
                        load_options=LoadOptions(device_map="auto", max_memory={0: "10GiB"},
                                                 revision="main", dtype="bfloat16",
                                                 draft_dtype="float32", draft_device="cpu"))
    assert one.loading == load
    one.invoke("Hello")
    assert len(seen) == 1 and one.engine is model.engine


def test_load_options_is_one_way_and_names_a_served_target(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    with pytest.raises(ValueError, match=re.escape("got load_options= and ['revision']; pass "
                                                   "the loader options one way")):
        ChatSpecGuard(draft="org/d", target="org/t", revision="v1",
                      load_options=LoadOptions(dtype="float32"))
    with pytest.raises(ValueError, match=re.escape("unknown dtype 'bf16'; use auto")):
        ChatSpecGuard(draft="org/d", target="org/t", load_options={"target_dtype": "bf16"})
    url = "http://127.0.0.1:9/v1"
    served = ChatSpecGuard(draft="org/d", load_options=LoadOptions(target_url=url,
                                                                   target_model="big"))
    assert served.model == url and served.loading.target_model == "big"
    with pytest.raises(ValueError, match="name the target once"):
        ChatSpecGuard(draft="org/d", target="org/t", load_options=LoadOptions(target_url=url))


@pytest.mark.parametrize(("option", "needle"), [
    (dict(target_dtype="bf16"), "target_dtype='bf16': unknown dtype"),
    (dict(draft_device="gpu"), "draft_device='gpu': unknown device 'gpu' (did you mean cuda?)"),
])
def test_a_bad_per_model_option_fails_at_construction(option: dict[str, Any], needle: str
                                                      ) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        ChatSpecGuard(draft="org/d", target="org/t", **option)


def test_without_config_or_preset_the_adapters_run_balanced() -> None:
    from specguard_core.config import preset
    from specguard_integrations.common import base_config

    assert base_config(None, None, None) == preset("balanced")  # no engine yet: the default
    assert base_config(None, "fast", None) == preset("fast")
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    assert ChatSpecGuard(engine=engine)._config(engine, {}) == CFG  # else the engine's own


def test_preset_applies_to_an_injected_engine_too() -> None:
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    assert ChatSpecGuard(engine=engine, preset="paper")._config(engine, {}).k == 16
    assert ChatSpecGuard(engine=engine)._config(engine, {}).k == CFG.k


# ---- item 3: json_schema / json_mode answers are verified ----------------------------------------
def test_json_schema_answers_are_verified_and_rewritten_by_the_target() -> None:
    """The check-only path (`response_format_mode="check"`): a draft answer off the schema goes
    to the target."""
    engine = scripted_engine(lambda p: BOB, lambda p: '{"name": "Bob"}',
                             config=CFG.merged(response_format_mode="check"))
    model = ChatSpecGuard(engine=engine)
    raw = model.with_structured_output(Person, method="json_schema",
                                       include_raw=True).invoke("Who is Bob?")
    assert raw["parsed"] == Person(name="Bob", age=42)  # type: ignore[index]
    (step,) = raw["raw"].response_metadata["specguard_steps"]  # type: ignore[index]
    assert (step["source"], step["accepted"]) == ("target", False)
    assert "'age' is a required property" in step["rejected_reason"]
    # without a response format the same confident draft answer is kept
    plain = model.invoke("Who is Bob?")
    assert plain.content == '{"name": "Bob"}'


def test_json_mode_rejects_a_draft_answer_that_is_not_json() -> None:
    engine = scripted_engine(lambda p: BOB, lambda p: "Bob is 42.",
                             config=CFG.merged(response_format_mode="check"))
    parsed = ChatSpecGuard(engine=engine).with_structured_output(
        None, method="json_mode").invoke("Who is Bob? Reply in JSON.")
    assert parsed == {"name": "Bob", "age": 42}


PROSE_THEN_JSON = "Bob is 42 years old.\n\nAs JSON: " + BOB  # a model that talks before it answers


@pytest.mark.parametrize("method", ["json_mode", "json_schema"])
def test_json_mode_is_a_guarantee_in_process(method: str) -> None:
    """Both models write prose first; the grammar leaves them only the JSON (checked, the same
    pair's answer is the prose)."""
    engine = scripted_engine(lambda p: PROSE_THEN_JSON, config=CFG)
    model = ChatSpecGuard(engine=engine)
    schema = None if method == "json_mode" else Person
    parsed = model.with_structured_output(schema, method=method).invoke("Who is Bob?")
    assert parsed in ({"name": "Bob", "age": 42}, Person(name="Bob", age=42))
    checked = ChatSpecGuard(engine=engine, config=CFG.merged(
        response_format_mode="check")).with_structured_output(schema, method=method)
    with pytest.raises(OutputParserException):
        checked.invoke("Who is Bob?")


def test_a_langgraph_agent_with_tools_and_a_pydantic_response_format() -> None:
    engine = scripted_engine(_agent_script(False), _agent_script(True), config=CFG)
    model = ChatSpecGuard(engine=engine)
    assert model.profile and model.profile["structured_output"]  # so the agent asks natively
    agent = create_agent(model, tools=[lookup_age], response_format=Person)
    state = agent.invoke({"messages": [HumanMessage("How old is Bob?")]})
    assert state["structured_response"] == Person(name="Bob", age=42)
    tool_results = [m for m in state["messages"] if m.type == "tool"]
    assert [m.content for m in tool_results] == ["42"]
    final = [m for m in state["messages"] if m.type == "ai"][-1]
    (step,) = final.response_metadata["specguard_steps"]
    assert step["source"] == "target"  # the draft's answer lacked "age" and was rewritten


# ---- item 5: profile from the models' configs, without loading weights --------------------------
def test_profile_comes_from_local_configs_without_loading(pair_dirs: tuple[Path, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def no_weights(*args: Any, **kwargs: Any) -> SpecGuardEngine:
        raise AssertionError("the profile must not load the models")

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(no_weights))
    draft, target = pair_dirs
    model = ChatSpecGuard(draft=str(draft), target=str(target))
    assert model.profile is not None
    assert (model.profile["max_input_tokens"], model.profile["max_output_tokens"]) == (512, 512)
    assert all(model.profile[k] for k in ("tool_calling", "tool_choice", "structured_output"))
    assert model.profile["reasoning_output"] is True  # the tokenizer declares <think>
    SummarizationMiddleware(model=model, trigger=("fraction", 0.8))  # accepted now


def test_profile_of_an_injected_engine_and_of_an_uncached_pair() -> None:
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    assert ChatSpecGuard(engine=engine).profile["max_input_tokens"] == engine.context_window  # type: ignore[index]
    uncached = ChatSpecGuard(draft="nobody/draft", target="nobody/target")
    assert uncached.profile is not None and "max_input_tokens" not in uncached.profile


# ---- item 7: parallel_tool_calls=False ----------------------------------------------------------
def test_parallel_tool_calls_false_keeps_one_call() -> None:
    two = ('<tool_call>\n{"name": "lookup_age", "arguments": {"person": "Bob"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "lookup_age", "arguments": {"person": "Ann"}}\n</tool_call>')
    engine = scripted_engine(lambda p: two, config=CFG)
    model = ChatSpecGuard(engine=engine)
    both = model.bind_tools([lookup_age]).invoke("Ages of Bob and Ann?")
    assert [c["args"]["person"] for c in both.tool_calls] == ["Bob", "Ann"]
    bound = model.bind_tools([lookup_age], parallel_tool_calls=False)
    one = bound.invoke("Ages of Bob and Ann?")
    assert [c["args"]["person"] for c in one.tool_calls] == ["Bob"]
    assert one.usage_metadata and both.usage_metadata  # the second call was never written
    assert one.usage_metadata["output_tokens"] < both.usage_metadata["output_tokens"]
    streamed = [c for chunk in bound.stream("Ages of Bob and Ann?")
                for c in chunk.tool_call_chunks]  # type: ignore[attr-defined]
    assert [json.loads(c["args"])["person"] for c in streamed] == ["Bob"]


# ---- token counting never reaches the hub --------------------------------------
def test_token_counting_of_an_uncached_pair_is_a_clear_error_not_a_download() -> None:
    model = ChatSpecGuard(draft="nobody/draft", target="nobody/target")
    with pytest.raises(ValueError, match="not available locally"):
        model.get_token_ids("hello")
    counted = ChatSpecGuard(draft="nobody/draft", target="nobody/target",
                            custom_get_token_ids=lambda text: [1] * len(text.split()))
    assert counted.get_num_tokens("two words") == 2


def test_smaller_steps_for_chat_streaming() -> None:
    """The README's chat-friendly option: one chunk per line instead of per paragraph."""
    engine = scripted_engine(lambda p: "Line one.\nLine two.\n\nLine three.", config=CFG)
    model = ChatSpecGuard(engine=engine)
    texts = [c.content for c in model.stream("Write three lines.")][:-1]
    assert texts == ["Line one.\nLine two.\n\n", "Line three."]
    lines = [c.content for c in model.stream("Write three lines.", step_delimiters=("\n",))][:-1]
    assert lines == ["Line one.\n", "Line two.\n", "\nLine three."]


def test_chat_template_kwargs_reach_the_chat_template() -> None:
    from tests.specguard_integrations.template_helpers import PLAIN, THOUGHT, thinking_engine

    engine = thinking_engine()
    thinking = ChatSpecGuard(engine=engine).invoke("Hi")
    assert thinking.content == THOUGHT.split("\n\n", 1)[1]
    assert thinking.additional_kwargs["reasoning_content"]
    off = ChatSpecGuard(engine=engine, chat_template_kwargs={"enable_thinking": False})
    assert off.invoke("Hi").content == PLAIN
    assert off.get_num_tokens_from_messages([HumanMessage("Hi")]) > \
        ChatSpecGuard(engine=engine).get_num_tokens_from_messages([HumanMessage("Hi")])
    per_call = ChatSpecGuard(engine=engine).invoke("Hi", chat_template_kwargs={
        "enable_thinking": False})
    assert per_call.content == PLAIN and "reasoning_content" not in per_call.additional_kwargs
    assert off.invoke("Hi", chat_template_kwargs={"enable_thinking": True}).content == \
        thinking.content  # the call's value wins over the field's


def test_chat_template_kwargs_that_are_not_template_variables_fail_before_loading() -> None:
    with pytest.raises(ValueError, match=r"cannot set \['tokenize'\]"):
        ChatSpecGuard(draft="d", model="t", chat_template_kwargs={"tokenize": True})
    model = ChatSpecGuard(draft="d", model="t")
    with pytest.raises(ValueError, match="must be a dict of template variables"):
        model.invoke("Hi", chat_template_kwargs="enable_thinking=False")
    assert model._engine is None
