"""A prompt over the context window is answered as OpenAI answers it: a 400 with code
`context_length_exceeded` on `messages` and OpenAI's wording, so the `openai` SDK and LangChain's
`ChatOpenAI` (a `ContextOverflowError`, which `SummarizationMiddleware` trims on) see it as such."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import ANSWER, live_server, reply  # noqa: E402

MODEL = "specguard-scripted"
WINDOW = 64  # tokens: a small window, so a few dozen words overflow it
LONG = " ".join(f"word{i}" for i in range(WINDOW))
WORDING = re.compile(r"This model's maximum context length is 64 tokens\. However, your "
                     r"messages resulted in (\d+) tokens\. Please reduce the length of the "
                     r"messages\.")


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    engine = scripted_engine(reply)
    engine.draft.context_window = engine.target.context_window = WINDOW
    with live_server(create_app(engine)) as url:
        yield f"{url}/v1"


@pytest.fixture
def client(base: str) -> Any:
    return openai.OpenAI(base_url=base, api_key="sk-local", max_retries=0, timeout=30)


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_window_is_context_length_exceeded(client: Any, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, stream=stream,
                                       messages=[{"role": "user", "content": LONG}])
    err = bad.value
    assert err.code == "context_length_exceeded" and err.param == "messages"
    assert err.type == "invalid_request_error"
    found = WORDING.fullmatch(err.body["message"])
    assert found is not None and int(found.group(1)) > WINDOW, err.body["message"]


def test_a_prompt_that_fits_is_answered(client: Any) -> None:
    out = client.chat.completions.create(model=MODEL, max_tokens=20,
                                         messages=[{"role": "user", "content": "Hi"}])
    assert ANSWER.startswith(out.choices[0].message.content)


def test_chat_openai_raises_langchain_s_context_overflow_error(base: str) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_core.exceptions import ContextOverflowError
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model=MODEL, base_url=base, api_key="sk-local", max_retries=0)
    with pytest.raises(ContextOverflowError, match="maximum context length is 64 tokens"):
        model.invoke(LONG)
