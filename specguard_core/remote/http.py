"""The HTTP side of a served target: one vLLM server's OpenAI-compatible API (`httpx`).

`ServerClient` asks and answers; it knows nothing of steps or caches (`remote.RemoteTarget` does).
Every wait for the server lends the engine to its other requests (`turns.waiting_io`), so
concurrent requests reach the server together and it batches them. Every failure is a
`RemoteTargetError` that names the server and says what to do: unreachable, a timeout, an HTTP
error (with the server's message), or an answer that is not what vLLM sends.

Plain httpx rather than the `openai` SDK's client: the SDK checks a token-id prompt one id at
a time against its parameter types, about 10 ms a call at 1000 ids on a 2-core VM
(benchmarks/notes/2026-12-02-openai-sdk-client.md).
"""

from __future__ import annotations

from typing import Any

import httpx

from specguard_core.concurrency.turns import waiting_io
from specguard_core.remote.deadline import DeadlineTransport, cap_passed, within

# sampling settings a server would otherwise take from the model's generation_config.json
# (top_k=-1: "disabled" in every vLLM release; newer ones also take 0)
_PLAIN = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
          "top_k": -1, "min_p": 0.0}


class RemoteTargetError(ConnectionError):
    """The target server could not be used; the message names the server and what to do. (A
    ConnectionError, so an OSError: the CLI prints it as one line.)"""


class ServerClient:
    """vLLM at `url` (`http://HOST:PORT/v1`); requests name `model` (settable: `connect` learns
    it from the server). Constructing one touches no network. `timeout_s` bounds each call as a
    whole, wall clock (connecting, sending, and the answer however slowly it arrives), through
    `deadline.DeadlineTransport`, and no call outlasts the request it serves (`deadline.capped`:
    then it raises TimeoutError); `transport` replaces it (tests)."""

    def __init__(self, url: str, model: str, *, timeout_s: float, api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.root = self.url.removesuffix("/v1")  # vLLM serves /tokenize beside /v1
        self.model = model
        self.timeout_s = float(timeout_s)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
                                    headers=headers, transport=transport or DeadlineTransport(url))

    def models(self) -> dict[str, dict[str, Any]]:
        """`/v1/models`: each served model's entry by its name."""
        listed = self.request("GET", f"{self.url}/models", None, "list its models")
        return {str(m.get("id")): m for m in listed.get("data", []) if isinstance(m, dict)}

    def tokenize(self, text: str, what: str) -> Any:
        """vLLM's `/tokenize` of `text` without special tokens (its token ids, as sent); `what`
        (the purpose) goes into errors."""
        answer = self.post(f"{self.root}/tokenize", {"prompt": text, "add_special_tokens": False},
                           what)
        return answer.get("tokens")

    def complete(self, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """One `/v1/completions` call (plain sampling unless `body` says otherwise): its choices."""
        answer = self.post(f"{self.url}/completions", {**_PLAIN, **body}, what)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self.unexpected(what, ValueError("no choices"))
        return choices

    def post(self, url: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        return self.request("POST", url, {"model": self.model, **body}, what)

    def request(self, method: str, url: str, body: dict[str, Any] | None, what: str
                ) -> dict[str, Any]:
        """The server's JSON object answer; `what` (the engine's purpose) goes into errors."""
        try:
            # the engine's other requests run their steps meanwhile; the whole call, body
            # included, ends within timeout_s and by the request's own deadline
            with waiting_io(), within(self.timeout_s):
                response = self._client.request(method, url, json=body)
        except httpx.TimeoutException:
            if cap_passed():
                raise TimeoutError(
                    f"the request's timeout ran out while the target server at {self.url} was "
                    f"answering (asked to {what}); retry with a larger timeout") from None
            raise RemoteTargetError(
                f"the target server at {self.url} did not answer in full within "
                f"{self.timeout_s:g}s (asked to {what}); it may be overloaded or still starting: "
                "retry, or raise target_timeout= (CLI: --target-timeout)") from None
        except httpx.TransportError as err:
            raise RemoteTargetError(
                f"cannot reach the target server at {self.url} ({err or type(err).__name__}); "
                "is vLLM running there? Start one with `scripts/vllm_target.sh serve` or "
                "`vllm serve MODEL`, or fix the URL (http://HOST:PORT/v1)") from None
        if response.status_code >= 400:
            raise RemoteTargetError(f"the target server at {self.url} answered HTTP "
                                    f"{response.status_code} when asked to {what}: "
                                    f"{server_message(response)}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self.unexpected(what, ValueError("not a JSON object"))
        return answer

    def unexpected(self, what: str, err: Exception) -> RemoteTargetError:
        return RemoteTargetError(f"the target server at {self.url} gave an unexpected answer when "
                                 f"asked to {what} ({type(err).__name__}: {err}); is it vLLM "
                                 "(>= 0.6, with prompt_logprobs and return_tokens_as_token_ids)?")

    def close(self) -> None:
        self._client.close()


def server_message(response: httpx.Response) -> str:
    """The error message in the server's JSON (vLLM's and OpenAI's shapes), else its text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        message = err.get("message") if isinstance(err, dict) else body.get("message") or err
        if message:
            return str(message)[:500]
    return str(body)[:500]
