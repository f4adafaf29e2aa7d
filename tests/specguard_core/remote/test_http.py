"""`ServerClient`: what each kind of server answer becomes (offline: httpx's MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from specguard_core.remote.http import RemoteTargetError, ServerClient, server_message

URL = "http://vllm.test:8000/v1"


def client(answer: Callable[[httpx.Request], httpx.Response]) -> ServerClient:
    return ServerClient(URL, "tiny", timeout_s=5, transport=httpx.MockTransport(answer))


def test_requests_name_the_model_and_plain_sampling_unless_the_body_says_otherwise() -> None:
    seen: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"index": 0}]})

    assert client(answer).complete({"prompt": [1, 2], "top_k": 5}, "verify tokens") == [{"index": 0}]
    assert seen[0]["model"] == "tiny" and seen[0]["prompt"] == [1, 2]
    assert seen[0]["top_k"] == 5 and seen[0]["repetition_penalty"] == 1.0


@pytest.mark.parametrize(("response", "message"), [
    (httpx.Response(200, json={"choices": []}), r"unexpected answer when asked to verify tokens"),
    (httpx.Response(200, text="<html>proxy</html>"), r"unexpected answer .*not a JSON object"),
    (httpx.Response(400, json={"error": {"message": "too long"}}), r"HTTP 400 .*: too long$"),
    (httpx.Response(404, json={"message": "no route"}), r"HTTP 404 .*: no route$"),
    (httpx.Response(500, text="boom"), r"HTTP 500 .*: boom$"),
])
def test_every_bad_answer_is_one_error_naming_the_server(response: httpx.Response,
                                                          message: str) -> None:
    with pytest.raises(RemoteTargetError, match=message) as err:
        client(lambda _: response).complete({"prompt": [1]}, "verify tokens")
    assert URL in str(err.value)


def test_an_unreachable_server_says_how_to_start_one() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(RemoteTargetError, match=r"cannot reach .*vllm serve"):
        client(refuse).models()


def test_server_message_reads_both_error_shapes_and_cuts_long_text() -> None:
    assert server_message(httpx.Response(400, json={"error": "bad"})) == "bad"
    assert server_message(httpx.Response(400, text="x" * 900)) == "x" * 500
    assert server_message(httpx.Response(400, text="")) == "Bad Request"
