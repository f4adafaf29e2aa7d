"""The remote target (`RemoteTarget`) against a fake vLLM server on 127.0.0.1 backed by the same
models as the in-process engine: the same greedy text, the same paths, one request per target
pass, and clear errors for an unreachable, slow, erroring or mismatched server."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.responses import Response

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.cache.handle import ModelHandle
from specguard_core.remote.target import NEG, RemoteTarget, RemoteTargetError
from specguard_core.testing import ScriptedLM, build_tokenizer
from specguard_core.text.chat import InputError
from tests.fixtures import WEATHER
from tests.specguard.serve.serve_helpers import live_server
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import GREEDY as CHECK_GREEDY
from tests.specguard_core.engine.test_engine import QUESTION as CHECK_QUESTION
from tests.specguard_core.remote.vllm_helpers import FakeVLLM, free_port

QUESTION = "What is 3 + 4, times 6?"
GREEDY = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=40, max_step_tokens=8, beta=1.0)
TARGET = "First, 3 + 4 = 7.\n\nThen 7 * 6 = 42.\n\nThe answer is 42."
DRAFT = "First, 3 + 4 = 7.\n\nThen 7 * 6 = 41.\n\nThe answer is 41."  # wrong in step 2
CALL = '<tool_call>\n\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tiny_server(tiny_pair: tuple[Any, Any, Any, Any]) -> Iterator[tuple[FakeVLLM, str]]:
    """The tiny pair's target behind a fake vLLM server: (server, its /v1 URL)."""
    fake = FakeVLLM(tiny_pair[2], tiny_pair[3], name="tiny-target")
    with live_server(fake.app()) as base:
        yield fake, f"{base}/v1"


def _engines(pair: tuple[Any, Any, Any, Any], url: str, model: str | None = "tiny-target",
             cfg: SpecGuardConfig = GREEDY) -> tuple[SpecGuardEngine, SpecGuardEngine]:
    d_model, d_tok, t_model, t_tok = pair
    local = SpecGuardEngine(d_model, d_tok, t_model, t_tok, config=cfg)
    remote = SpecGuardEngine(d_model, d_tok, RemoteTarget.connect(url, model, t_tok), config=cfg)
    return local, remote


@pytest.mark.parametrize("fallback", ["greedy", "speculative"])
def test_every_step_rejected_gives_the_in_process_targets_greedy_text(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str], fallback: str) -> None:
    fake, url = tiny_server
    local, remote = _engines(tiny_pair, url)
    want = local.generate(QUESTION, tau=math.inf, fallback=fallback)
    fake.requests.clear()
    got = remote.generate(QUESTION, tau=math.inf, fallback=fallback)
    assert got.raw_text == want.raw_text and got.usage == want.usage
    assert [s.path for s in got.steps] == [s.path for s in want.steps]
    assert got.stats.target.forward_calls == len(fake.requests)  # one request per target pass
    if fallback == "greedy":  # the target writes each step in one call (plus continuations)
        assert {s.path for s in got.steps} == {"regenerated"}
        assert all(r["max_tokens"] <= GREEDY.max_step_tokens for r in fake.requests)
    else:  # the draft's tokens are verified in passes over prompt_logprobs
        assert {s.path for s in got.steps} == {"target-verified"}
        assert all(r["prompt_logprobs"] == 20 for r in fake.requests if r["max_tokens"] == 1)


def test_sampling_on_the_server_is_seeded_by_the_request(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str]) -> None:
    """temperature > 0: the sample fallback asks for a seeded sample, and the speculative
    fallback samples over the server's top K; the same seed gives the same text."""
    fake, url = tiny_server
    _, remote = _engines(tiny_pair, url)
    sample = {"temperature": 0.9, "top_p": 0.95, "tau": math.inf, "seed": 7}
    fake.requests.clear()
    first = remote.generate(QUESTION, fallback="sample", fallback_k=1, top_k=5, min_p=0.01,
                            **sample)
    writes = [r for r in fake.requests if r["max_tokens"] > 1 or "stop" in r]
    assert {s.path for s in first.steps} == {"regenerated"} and first.usage.completion_tokens
    assert all(r["n"] == 1 and isinstance(r["seed"], int) and r["temperature"] == 0.9
               and r["repetition_penalty"] == 1.0 and r["top_k"] == 5 and r["min_p"] == 0.01
               for r in writes[:1])  # the request's top-k and min-p reach the server
    assert remote.generate(QUESTION, fallback="sample", fallback_k=1, top_k=5, min_p=0.01,
                           **sample).raw_text == first.raw_text
    # the server's log-probabilities of the tokens it wrote are the step's
    assert all(len(s.token_logprobs) == len(s.token_ids) and all(
        lp is not None and lp <= 0 for lp in s.token_logprobs) for s in first.steps)
    spec = remote.generate(QUESTION, fallback="speculative", **sample)
    assert {s.path for s in spec.steps} == {"target-verified"} and spec.usage.completion_tokens
    assert remote.generate(QUESTION, fallback="speculative", **sample).raw_text == spec.raw_text


def test_every_step_kept_is_the_drafts_text_and_never_asks_the_server(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str]) -> None:
    fake, url = tiny_server
    local, remote = _engines(tiny_pair, url)
    fake.requests.clear()
    got = remote.generate(QUESTION, tau=-math.inf)
    assert got.raw_text == local.generate(QUESTION, tau=-math.inf).raw_text
    assert {s.path for s in got.steps} == {"kept"} and fake.requests == []


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A scripted pair (the draft is wrong in step 2, and repeats a tool call) with its target
    behind a fake vLLM server."""
    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    target = ScriptedLM(tok, lambda p: CALL if "<tools>" in p else TARGET, layers=4,
                        name="scripted-target")
    draft = ScriptedLM(tok, lambda p: CALL if "<tools>" in p else DRAFT, name="scripted-draft")
    fake = FakeVLLM(target, tok, name="scripted-target")
    with live_server(fake.app()) as base:
        yield {"tok": tok, "target": target, "draft": draft, "fake": fake, "url": f"{base}/v1"}


def _scripted_engines(s: dict[str, Any]) -> tuple[SpecGuardEngine, SpecGuardEngine]:
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256, fallback="speculative")
    local = SpecGuardEngine(s["draft"], s["tok"], s["target"], s["tok"], config=cfg)
    remote = SpecGuardEngine(s["draft"], s["tok"], RemoteTarget.connect(s["url"], None, s["tok"]),
                             config=cfg)
    return local, remote


def test_each_path_is_taken_and_recorded_as_in_process(scripted: dict[str, Any]) -> None:
    local, remote = _scripted_engines(scripted)
    kept = remote.generate("Go", tau=-math.inf)
    assert [s.path for s in kept.steps] == ["kept"] * 3 and kept.raw_text == DRAFT
    checked = remote.generate("Go", route="check")
    want = local.generate("Go", route="check")
    assert checked.raw_text == want.raw_text == TARGET
    paths = [s.path for s in checked.steps]
    assert paths == [s.path for s in want.steps]
    assert paths[0] == "target-checked" and paths[1] == "target-verified"
    assert checked.steps[1].verified_prefix == want.steps[1].verified_prefix > 0
    regen = remote.generate("Go", tau=math.inf, fallback="greedy")
    assert {s.path for s in regen.steps} == {"regenerated"} and regen.raw_text == TARGET


def test_a_step_the_server_stops_inside_is_continued(scripted: dict[str, Any]) -> None:
    """The server stops at every step marker, also at one inside a tool call ("<tool_call>" and
    "\\n\\n" here): the step goes on until the engine's own rules end it."""
    local, remote = _scripted_engines(scripted)
    fake = scripted["fake"]
    fake.requests.clear()
    got = remote.generate("Weather?", tools=[WEATHER], tau=math.inf, fallback="greedy")
    want = local.generate("Weather?", tools=[WEATHER], tau=math.inf, fallback="greedy")
    assert got.raw_text == want.raw_text == CALL
    assert got.steps[0].kind == "tool_call" and got.tool_calls[0].arguments == {"city": "Paris"}
    # stopped at "<tool_call>", then at "\n\n", then went on to the step's end: three requests
    assert got.steps[0].target_passes == 3 and len(fake.requests) == got.stats.target.forward_calls


def test_a_pass_holds_the_servers_top_k_and_its_argmax(scripted: dict[str, Any]) -> None:
    tok = scripted["tok"]
    remote = RemoteTarget.connect(scripted["url"], "scripted-target", tok, top_logprobs=5)
    local = ModelHandle(scripted["target"], tok)
    prompt = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    step = tok("First, 3", add_special_tokens=False)["input_ids"]
    states = [h.new_state() for h in (remote, local)]
    for state in states:
        state.pending = list(prompt)
    got, want = remote.try_tokens(states[0], step), local.try_tokens(states[1], step)
    assert got.logits.shape == want.logits.shape  # [T+1, V]
    assert torch.equal(got.logits.argmax(-1), want.logits.argmax(-1))
    assert ((got.logits > NEG).sum(-1) <= 6).all()  # the top 5 and the token itself
    got.keep(2)
    assert states[0].ids == prompt + step[:2] and states[0].pending == []


@pytest.mark.parametrize("batching", [False, True])
def test_concurrent_requests_wait_for_the_server_together(tiny_pair: Any, batching: bool) -> None:
    """While one request waits for the server's answer the others run their steps and send
    theirs (the turn is lent, `turns.waiting_io`): the server sees overlapping requests, which a
    lock held across the HTTP call would never allow, and each text equals its serial run."""
    d_model, d_tok, t_model, t_tok = tiny_pair
    fake = FakeVLLM(t_model, t_tok, name="slow", delay_s=0.2)
    questions = [QUESTION, "What is 5 times 5?", "Name three colours."]
    with live_server(fake.app()) as base:
        engine = SpecGuardEngine(d_model, d_tok, RemoteTarget.connect(f"{base}/v1", "slow", t_tok),
                                 config=GREEDY, engine_config=EngineConfig(batching=batching))
        want = [engine.generate(q, tau=math.inf).raw_text for q in questions]
        fake.spans.clear()
        with ThreadPoolExecutor(len(questions)) as pool:
            got = list(pool.map(lambda q: engine.generate(q, tau=math.inf).raw_text, questions))
    assert got == want
    spans = sorted(fake.spans)
    overlapping = sum(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))
    assert overlapping >= len(spans) // 3, spans  # serialised calls would give 0


def test_a_served_target_checks_the_step_while_the_draft_writes_it(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """`check_tokens` with a served target: the pass grows by one request per chunk
    (`RemoteTarget.try_more`); the output and paths equal checking each written step, and fewer
    draft tokens are wasted."""
    d_model, d_tok, t_model, t_tok = noisy_copy_pair(tmp_path_factory.mktemp("noisy-remote"),
                                                     noise=0.01)  # some steps pass
    fake = FakeVLLM(t_model, t_tok, name="noisy")
    checked = dict(route="check", typical_eps=0.03,
                   typical_delta=0.1, typical_ratio=0.3)
    with live_server(fake.app()) as base:
        target = RemoteTarget.connect(f"{base}/v1", "noisy", t_tok)
        grown: list[int] = []
        try_more = target.try_more
        target.try_more = lambda tpass, ids: (grown.append(len(ids)), try_more(tpass, ids))[1]
        engine = SpecGuardEngine(d_model, d_tok, target,
                                 config=SpecGuardConfig(**CHECK_GREEDY, fallback="speculative"))
        whole = engine.generate(CHECK_QUESTION, **checked)
        assert grown == []
        growing = engine.generate(CHECK_QUESTION, check_tokens=3, **checked)
    assert [s.token_ids for s in growing.steps] == [s.token_ids for s in whole.steps]
    assert [s.path for s in growing.steps] == [s.path for s in whole.steps]
    assert {"target-checked", "target-verified"} <= {s.path for s in whole.steps}
    wasted = [sum(s.draft_wasted for s in r.steps) for r in (growing, whole)]
    assert wasted[0] < wasted[1]
    assert grown  # the pass grew with the draft's step


# ---- errors ---------------------------------------------------------------------------------
def test_an_unreachable_server_is_a_clear_error(tiny_pair: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(RemoteTargetError, match=r"cannot reach the target server at .*vllm"):
        RemoteTarget.connect(url, "m", tiny_pair[3])


def test_a_slow_server_times_out_with_a_clear_error(tiny_pair: Any) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    fake = FakeVLLM(t_model, t_tok, name="slow", delay_s=1.5)
    with live_server(fake.app()) as base:
        target = RemoteTarget.connect(f"{base}/v1", "slow", t_tok, timeout_s=0.3)
        engine = SpecGuardEngine(d_model, d_tok, target, config=GREEDY)
        with pytest.raises(RemoteTargetError, match=r"did not answer in full within 0.3s.*target_timeout"):
            engine.generate(QUESTION, tau=math.inf)


def test_a_slow_server_call_ends_at_the_requests_own_timeout(tiny_pair: Any) -> None:
    """A request's `timeout` bounds the served target's call too: the call is cut off when the
    request's time runs out, long before `target_timeout`, as a TimeoutError."""
    d_model, d_tok, t_model, t_tok = tiny_pair
    fake = FakeVLLM(t_model, t_tok, name="slow", delay_s=3.0)
    with live_server(fake.app()) as base:
        target = RemoteTarget.connect(f"{base}/v1", "slow", t_tok, timeout_s=60)
        engine = SpecGuardEngine(d_model, d_tok, target, config=GREEDY)
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=r"timeout of 1\.0s"):
            engine.generate(QUESTION, tau=math.inf, timeout=1.0)
        assert time.monotonic() - began < 2.5  # not the server's 3 s, nor target_timeout


def test_a_server_with_another_tokenizer_or_model_is_refused(
        tiny_pair: Any, tmp_path: Path) -> None:
    other = build_tokenizer(tmp_path / "other", vocab_size=300)
    fake = FakeVLLM(tiny_pair[2], tiny_pair[3], name="tiny-target", served_tokenizer=other)
    with live_server(fake.app()) as base:
        with pytest.raises(RemoteTargetError, match="another tokenizer.*target_tokenizer"):
            RemoteTarget.connect(f"{base}/v1", "tiny-target", tiny_pair[3])
        with pytest.raises(RemoteTargetError, match=r"serves \['tiny-target'\], not 'llama'"):
            RemoteTarget.connect(f"{base}/v1", "llama", tiny_pair[3])


def test_an_http_error_carries_the_servers_message(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str]) -> None:
    d_model, d_tok, _, t_tok = tiny_pair
    target = RemoteTarget.connect(tiny_server[1], "tiny-target", t_tok, top_logprobs=30)
    engine = SpecGuardEngine(d_model, d_tok, target, config=GREEDY)
    with pytest.raises(RemoteTargetError, match=r"HTTP 400 .*greater than max allowed: 20"):
        engine.generate(QUESTION, tau=math.inf, fallback="speculative")


def test_what_a_remote_target_cannot_do_is_refused(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str]) -> None:
    _, remote = _engines(tiny_pair, tiny_server[1])
    with pytest.raises(InputError, match="score with the draft"):
        remote.generate(QUESTION, experimental={"scoring_model": "target"})
    with pytest.raises(InputError, match="repetition_penalty needs the target's raw logits"):
        remote.generate(QUESTION, repetition_penalty=1.2)
    with pytest.raises(InputError, match="presence_penalty and frequency_penalty"):
        remote.generate(QUESTION, frequency_penalty=0.5)
    with pytest.raises(InputError, match="fallback_k=4 samples from a served target"):
        remote.generate(QUESTION, fallback="sample", fallback_k=4)
    with pytest.raises(ValueError, match="must start with http"):
        RemoteTarget("127.0.0.1:8000/v1", "m", tiny_pair[3], context_window=10)
    with pytest.raises(ValueError, match="target_model applies to a target served over HTTP"):
        SpecGuardEngine.from_pretrained("a", "b", target_model="m")


def test_from_pretrained_with_a_target_url(
        pair_dirs: tuple[Path, Path], tiny_pair: Any) -> None:
    """The draft loads from its folder; the target's tokenizer comes from target_tokenizer=, or
    else the draft's; the served model is found by name, or is the only one served."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    draft_dir, target_dir = pair_dirs
    t_model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    fake = FakeVLLM(t_model, AutoTokenizer.from_pretrained(target_dir), name="served")
    with live_server(fake.app()) as base:
        engine = SpecGuardEngine.from_pretrained(
            str(draft_dir), f"{base}/v1", target_model="served", target_tokenizer=str(target_dir),
            device="cpu", dtype="float32", config=GREEDY, progress=False)
        assert isinstance(engine.target, RemoteTarget) and engine.context_window == 512
        assert engine.model_name == "specguard:draft+served"
        result = engine.generate(QUESTION, tau=math.inf)
        assert result.usage.completion_tokens > 0 and result.stats.target.forward_calls > 0
        only = SpecGuardEngine.from_pretrained(str(draft_dir), f"{base}/v1", device="cpu",
                                               dtype="float32", config=GREEDY, progress=False)
        assert only.generate(QUESTION, tau=math.inf).raw_text == result.raw_text
        with pytest.raises(OSError, match="target_tokenizer './nowhere' is not available locally"):
            SpecGuardEngine.from_pretrained(str(draft_dir), f"{base}/v1",
                                            target_tokenizer="./nowhere", progress=False)


@pytest.mark.parametrize("window", [None, 0])
def test_no_max_model_len_is_no_window(tiny_pair: Any, window: Any) -> None:
    """A server that does not report its window leaves the local tokenizer's limit, else none:
    requests run (a window of 0 is no window, not no room)."""
    fake = FakeVLLM(tiny_pair[2], tiny_pair[3], name="tiny-target", max_model_len=window)
    fake._problem = lambda body: None  # type: ignore[method-assign]  # it takes any length
    with live_server(fake.app()) as base:
        target = RemoteTarget.connect(f"{base}/v1", "tiny-target", tiny_pair[3])
        assert target.context_window == 0
        engine = SpecGuardEngine(tiny_pair[0], tiny_pair[1], target, config=GREEDY)
        result = engine.generate(QUESTION, tau=math.inf)
    assert result.usage.completion_tokens == GREEDY.max_new_tokens


@pytest.mark.parametrize("window", [10**30, 2**40, -5, "512", True, 3.5])
def test_an_absurd_max_model_len_is_refused(tiny_pair: Any, window: Any) -> None:
    fake = FakeVLLM(tiny_pair[2], tiny_pair[3], name="tiny-target", max_model_len=window)
    with live_server(fake.app()) as base, pytest.raises(RemoteTargetError) as err:
        RemoteTarget.connect(f"{base}/v1", "tiny-target", tiny_pair[3])
    assert base in str(err.value) and "max_model_len" in str(err.value)


@pytest.mark.parametrize(("where", "value"), [("token", math.nan), ("token", 3.0),
                                              ("top", math.nan), ("prompt", math.nan)])
def test_nan_log_probabilities_are_a_clear_error(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str], monkeypatch: pytest.MonkeyPatch,
        where: str, value: float) -> None:
    """A pass's rows (`prompt_logprobs`, `top_logprobs`) and a written step's token log-probs
    are the server's output: NaN, or a log-probability above 0, is refused, naming the server."""
    fake, url = tiny_server
    _, remote = _engines(tiny_pair, url)
    real = fake._complete

    def broken(body: dict[str, Any]) -> Response:
        answer = real(body)
        for choice in answer["choices"]:
            if where == "token":
                choice["logprobs"]["token_logprobs"][0] = value
            elif where == "top":
                top = choice["logprobs"]["top_logprobs"][0]
                top[next(iter(top))] = value
            elif choice["prompt_logprobs"]:
                row = choice["prompt_logprobs"][-1]
                row[next(iter(row))]["logprob"] = value
        return Response(json.dumps(answer), media_type="application/json")  # NaN as vLLM sends

    monkeypatch.setattr(fake, "_complete", broken)
    fallback = "greedy" if where == "token" else "speculative"
    with pytest.raises(RemoteTargetError, match=f"{url}.*not one"):
        remote.generate(QUESTION, tau=math.inf, fallback=fallback)


def test_served_ids_outside_the_vocabulary_are_a_clear_error(
        tiny_pair: Any, tiny_server: tuple[FakeVLLM, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, url = tiny_server
    _, remote = _engines(tiny_pair, url)
    real = fake._choice

    def far_ids(*args: Any, **kwargs: Any) -> dict[str, Any]:
        choice = real(*args, **kwargs)
        choice["logprobs"]["tokens"] = [f"token_id:{10**6}" for _ in choice["logprobs"]["tokens"]]
        return choice

    monkeypatch.setattr(fake, "_choice", far_ids)
    with pytest.raises(RemoteTargetError, match="outside the vocabulary"):
        remote.generate(QUESTION, tau=math.inf, fallback="greedy")


def test_a_served_target_writes_a_call_longer_than_the_step_budget(tmp_path: Path) -> None:
    """The server writes the step in calls of what the step may still take: past
    `max_step_tokens` while a tool call is open, up to its closer."""
    city = "Paris " * 40
    body = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    call = f"<tool_call>\n{body}\n</tool_call>"
    tok = build_tokenizer(tmp_path)
    target = ScriptedLM(tok, lambda p: call, layers=4, name="scripted-target")
    draft = ScriptedLM(tok, lambda p: "No call.", name="scripted-draft")
    fake = FakeVLLM(target, tok, name="scripted-target", max_model_len=2048)
    with live_server(fake.app()) as base:
        engine = SpecGuardEngine(draft, tok, RemoteTarget.connect(f"{base}/v1", None, tok),
                                 config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=600,
                                                        max_step_tokens=16, fallback="greedy"))
        result = engine.generate("Weather?", tools=[WEATHER], tau=math.inf)
    assert [c.arguments for c in result.tool_calls] == [{"city": city}]
    assert result.steps[0].text == call and result.finish_reason == "tool_calls"
