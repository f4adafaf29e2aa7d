"""/v1/completions as raw continuation, and what lm-eval's `local-completions` sends: token-id
prompts in batches, `echo` + `logprobs` with `max_tokens` 1 or 0 (log-likelihoods), generation
with `until` stop strings; the tokenizer endpoints lm-eval's remote tokenizer reads. Through a
live server, with the `openai` client and httpx."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    error_of,
    live_server,
    raw,
    sse_events,
)

MODEL = "specguard-scripted"


@pytest.fixture(scope="module")
def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def post(base: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base}/v1/completions", json={"model": MODEL, **body}, timeout=60)


def ids_of(base: str, text: str) -> list[int]:
    tokens: list[int] = httpx.post(f"{base}/tokenize", json={"prompt": text},
                                   timeout=10).json()["tokens"]
    return tokens


def target_logprobs(engine: SpecGuardEngine, ids: list[int]) -> list[float]:
    """Each of `ids[1:]`'s log-probability under the target, from one plain forward."""
    logits = engine.target.model(torch.tensor([ids]), logits_to_keep=0).logits[0]  # [P, V]
    rows = torch.log_softmax(logits[:-1].float(), dim=-1)
    return rows.gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def test_the_prompt_is_continued_as_it_is(engine: SpecGuardEngine, client: openai.OpenAI
                                          ) -> None:
    prompt = raw("What is (3 + 4) * 6?")
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=100)
    assert out.choices[0].text == ANSWER
    assert prompt in engine.target.model.calls or prompt in engine.draft.model.calls
    cont = client.completions.create(model=MODEL, prompt=prompt + "First, add", max_tokens=100)
    assert cont.choices[0].text == ANSWER.removeprefix("First, add")  # no template around it
    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=100, echo=True)
    assert echoed.choices[0].text == prompt + ANSWER


def test_token_id_prompts_and_batches_answer_prompt_by_prompt(base: str) -> None:
    a, b = raw("What is (3 + 4) * 6?"), raw("Repeat: zebra")
    body = post(base, prompt=[ids_of(base, a), ids_of(base, b)], n=2, max_tokens=64).json()
    texts = [(c["index"], c["text"]) for c in body["choices"]]
    said = "You said zebra.\n\nThat is all."
    assert texts == [(0, ANSWER), (1, ANSWER), (2, said), (3, said)]
    assert body["usage"]["prompt_tokens"] == len(ids_of(base, a)) + len(ids_of(base, b))
    by_text = post(base, prompt=[a, b], max_tokens=64).json()
    assert [c["text"] for c in by_text["choices"]] == [ANSWER, said]
    single = post(base, prompt=ids_of(base, b), max_tokens=64).json()
    assert single["choices"][0]["text"] == said


@pytest.mark.parametrize("max_tokens", [1, 0])
def test_lm_eval_loglikelihood_requests(engine: SpecGuardEngine, base: str,
                                        max_tokens: int) -> None:
    """lm-eval's loglikelihood payload (token ids, echo, logprobs=1, temperature 0, seed), read
    as its `parse_logprobs` reads it: the continuation's log-probabilities sum, and whether each
    of its tokens is the most likely one."""
    context, continuation = ids_of(base, raw("Repeat: zebra")), ids_of(base, "You said")
    wrong = ids_of(base, "Nothing at")
    payload = {"prompt": [context + continuation, context + wrong], "temperature": 0,
               "max_tokens": max_tokens, "logprobs": 1, "seed": 1234, "echo": True}
    body = post(base, **payload).json()
    results = []
    for choice, cont in zip(sorted(body["choices"], key=lambda c: c["index"]),
                            (continuation, wrong), strict=True):
        lp = choice["logprobs"]
        n = len(context) + len(cont)
        assert len(lp["token_logprobs"]) == n + max_tokens and lp["token_logprobs"][0] is None
        assert lp["top_logprobs"][0] is None and len(lp["text_offset"]) == len(lp["tokens"])
        end = len(lp["token_logprobs"]) - max_tokens
        scored = lp["token_logprobs"][len(context):end]
        tops = lp["top_logprobs"][len(context):end]
        greedy = all(t == max(top.values()) for t, top in zip(scored, tops, strict=True))
        results.append((sum(scored), greedy))
        assert scored == pytest.approx(target_logprobs(engine, context + cont)[len(context) - 1:],
                                       abs=1e-4)
    assert results[0][1] and not results[1][1]  # the script says "You said", not "Nothing"
    assert results[0][0] > results[1][0]
    if max_tokens == 0:
        assert all(c["finish_reason"] == "length" for c in body["choices"])
        assert body["usage"]["completion_tokens"] == 0


def test_lm_eval_generate_requests(base: str) -> None:
    payload = {"prompt": [raw("What is (3 + 4) * 6?")], "max_tokens": 256, "temperature": 0,
               "stop": ["\n\n", "<|im_end|>"], "seed": 1234}
    body = post(base, **payload).json()
    assert body["choices"][0]["text"] == ANSWER.split("\n\n")[0]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_text_before_a_stop_keeps_its_spaces(base: str) -> None:
    text = post(base, prompt=raw("What is (3 + 4) * 6?"), stop=["3"]).json()["choices"][0]["text"]
    assert text == "First, add "


def test_streamed_completions_carry_the_same_text_and_logprobs(base: str) -> None:
    body = {"prompt": raw("What is (3 + 4) * 6?"), "max_tokens": 100, "logprobs": 2,
            "echo": True}
    whole = post(base, **body).json()["choices"][0]
    with httpx.stream("POST", f"{base}/v1/completions", json={"model": MODEL, "stream": True,
                                                              **body}, timeout=60) as r:
        events = sse_events(r.iter_lines())
    chunks = [e["choices"][0] for e in events[:-1] if e["choices"]]
    assert "".join(c["text"] for c in chunks) == whole["text"]
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        got = [x for c in chunks if c["logprobs"] for x in c["logprobs"][key]]
        assert got == whole["logprobs"][key], key
    assert chunks[-1]["finish_reason"] == "stop"


def test_chat_top_logprobs_streamed_and_not(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "What is (3 + 4) * 6?"}]
    out = client.chat.completions.create(model=MODEL, messages=messages, logprobs=True,
                                         top_logprobs=2)
    content = out.choices[0].logprobs.content  # type: ignore[union-attr]
    assert all(len(t.top_logprobs) == 2 for t in content)
    assert all(t.top_logprobs[0].logprob >= t.logprob for t in content)
    assert any(t.token == t.top_logprobs[0].token for t in content)
    streamed = [c for c in client.chat.completions.create(
        model=MODEL, messages=messages, logprobs=True, top_logprobs=2, stream=True)]
    got = [t for c in streamed if c.choices and c.choices[0].logprobs
           for t in c.choices[0].logprobs.content or []]
    assert [t.model_dump() for t in got] == [t.model_dump() for t in content]
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == ANSWER


def test_a_final_assistant_message_is_continued(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "What is (3 + 4) * 6?"},
                     {"role": "assistant", "content": "First, add 3"}]
    out = client.chat.completions.create(model=MODEL, messages=messages)
    assert out.choices[0].message.content == ANSWER.removeprefix("First, add 3").strip()
    echoed = client.chat.completions.create(model=MODEL, messages=messages,
                                            extra_body={"echo": True})
    assert echoed.choices[0].message.content == "First, add 3" + out.choices[0].message.content
    fresh = client.chat.completions.create(model=MODEL, messages=messages,
                                           extra_body={"add_generation_prompt": True})
    assert fresh.choices[0].message.content == ANSWER
    with pytest.raises(openai.BadRequestError, match="continue_final_message"):
        client.chat.completions.create(model=MODEL, messages=messages[:1],
                                       extra_body={"add_generation_prompt": False})


def test_count_penalties_reach_the_engine(engine: SpecGuardEngine,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fixtures import record_stream_configs

    seen = record_stream_configs(engine, monkeypatch)
    with live_server(create_app(engine)) as url:
        r = post(url, prompt=raw("q"), presence_penalty=0.5, frequency_penalty=-0.25)
        assert r.status_code == 200, r.text
    assert (seen[0].presence_penalty, seen[0].frequency_penalty) == (0.5, -0.25)


def test_tokenizer_endpoints(engine: SpecGuardEngine, base: str) -> None:
    text = raw("hi")
    tok = httpx.post(f"{base}/tokenize", json={"prompt": text, "return_token_strs": True},
                     timeout=10).json()
    assert tok["tokens"] == engine.tokenizer(text)["input_ids"] and tok["count"] == len(
        tok["tokens"]) and "".join(tok["token_strs"]) == text
    assert tok["max_model_len"] == engine.context_window
    chat = httpx.post(f"{base}/tokenize", json={"messages": [{"role": "user", "content": "hi"}]},
                      timeout=10).json()
    assert chat["tokens"] == engine.prompt_ids([{"role": "user", "content": "hi"}])
    back = httpx.post(f"{base}/detokenize", json={"tokens": tok["tokens"]}, timeout=10).json()
    assert back == {"prompt": text}
    info = httpx.get(f"{base}/tokenizer_info", timeout=10).json()
    assert info["eos_token"] == "<|im_end|>" and "im_start" in info["chat_template"]
    assert httpx.get(f"{base}/version", timeout=10).json()["version"]
    card = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]
    assert card["max_model_len"] == engine.context_window
    err = error_of(httpx.post(f"{base}/detokenize", json={"tokens": [10**7]}, timeout=10), 400)
    assert err["param"] == "tokens"
    both = httpx.post(f"{base}/tokenize", json={"prompt": "a", "messages": []}, timeout=10)
    assert error_of(both, 400)["param"] == "prompt"


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"prompt": "", "max_tokens": 5}, "prompt", "empty"),
    ({"prompt": [[]]}, "prompt", "empty"),
    ({"prompt": [1, -2]}, "prompt", "never negative"),
    ({"prompt": [10**7]}, "prompt", "outside the vocabulary"),
    ({"prompt": ["a"] * 33, "n": 2}, "prompt", "at most 64"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens", "echo"),
    ({"prompt": "a", "logprobs": 21}, "logprobs", "less than or equal to 20"),
    ({"prompt": [True, 2]}, "prompt.str", ""),
    ({"prompt": "a", "suffix": "b"}, "suffix", "suffix"),
])
def test_bad_completions_are_400(base: str, body: dict[str, Any], param: str | None,
                                 needle: str) -> None:
    err = error_of(post(base, **body), 400)
    assert err["param"] == param and needle in err["message"], err


def test_the_responses_api_404_says_why(base: str) -> None:
    err = error_of(httpx.post(f"{base}/v1/responses", json={"model": MODEL}, timeout=10), 404)
    assert "/v1/chat/completions" in err["message"] and "decisions" in err["message"]
