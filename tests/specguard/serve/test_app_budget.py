"""The answer budget through the server: a request without max_tokens (ChatOpenAI's, the Agents
SDK's, a chat UI's) runs until the answer ends or the context window is full, as vLLM's does; an
operator's `--max-tokens-cap` bounds requests that set one and those that set none."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specguard.serve.api.extension import Limits  # noqa: E402
from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core import SpecGuardConfig  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import error_of, live_server, post_chat  # noqa: E402

LONG = "\n\n".join(f"Point {i} of the plan." for i in range(90))  # > 512 tokens and > 64 steps
ASK = [{"role": "user", "content": "Plan it all."}]


def test_no_max_tokens_means_the_whole_answer() -> None:
    engine = scripted_engine(lambda prompt: LONG, config=SpecGuardConfig(k=1, temperature=0.0))
    with live_server(create_app(engine)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)
        out = client.chat.completions.create(model="specguard-scripted", messages=ASK)
        capped = client.chat.completions.create(model="specguard-scripted", messages=ASK,
                                                max_tokens=20)
    assert out.choices[0].message.content == LONG and out.choices[0].finish_reason == "stop"
    assert out.usage is not None and out.usage.completion_tokens > 512
    assert capped.choices[0].finish_reason == "length"
    assert capped.usage is not None and capped.usage.completion_tokens == 20


def test_the_operators_cap_bounds_every_request() -> None:
    engine = scripted_engine(lambda prompt: LONG, config=SpecGuardConfig(k=1, temperature=0.0))
    settings = ServeSettings(limits=Limits(max_tokens=30))
    with live_server(create_app(engine, settings)) as url:
        unset = post_chat(url, messages=ASK)
        over = post_chat(url, messages=ASK, max_tokens=31)
    assert unset.status_code == 200, unset.text
    body = unset.json()
    assert body["usage"]["completion_tokens"] == 30
    assert body["choices"][0]["finish_reason"] == "length"
    assert "max_tokens must be <= 30" in error_of(over, 400)["message"]
