"""Per-call overhead of the `openai` SDK's client against the served target's httpx client.

`httpx`: `specguard_core.remote.http.ServerClient` as it is. `sdk`: the same client with its
`/v1/completions` call made as `completions.create(model=, prompt=ids, <OpenAI fields>,
extra_body=<vLLM fields>)` over the same httpx client (`max_retries=0`). `sdk-extra`: that call
with every field in `extra_body` and `prompt=""` (the SDK then skips transforming the token ids).
Modes: `mock` (no network: httpx.MockTransport), `canned` (fixed answers from uvicorn in another
process), `fake` (the tests' FakeVLLM over a tiny random target, in another process). Prints each
call's milliseconds (min and median of 7 interleaved rounds). Needs the `dev` extra.

    python benchmarks/openai_sdk_overhead.py [mock] [canned] [fake]
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specguard_core.remote.http import _PLAIN, ServerClient  # noqa: E402

# the completion fields the SDK takes as arguments; the rest go in extra_body
OPENAI_FIELDS = {"prompt", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "logprobs",
                 "frequency_penalty", "presence_penalty"}


class SdkClient(ServerClient):
    """`ServerClient` with its completions through the `openai` SDK (no key sent)."""

    everything_in_extra_body = False

    def __init__(self, url: str, model: str, **kwargs: Any) -> None:
        import openai

        super().__init__(url, model, **kwargs)
        self.api = openai.OpenAI(api_key="unused", base_url=self.url, max_retries=0,
                                 timeout=self._client.timeout, http_client=self._client)
        self.headers = {"Authorization": openai.Omit()}

    def models(self) -> dict[str, dict[str, Any]]:
        page = self.api.models.list(extra_headers=self.headers)
        return {str(m.id): m.to_dict() for m in page.data}

    def complete(self, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        sent = {**_PLAIN, **body}
        if self.everything_in_extra_body:
            known, extra = {"prompt": ""}, sent
        else:
            known = {k: v for k, v in sent.items() if k in OPENAI_FIELDS}
            extra = {k: v for k, v in sent.items() if k not in OPENAI_FIELDS}
        answer = self.api.completions.create(model=self.model, **known, extra_body=extra,
                                             extra_headers=self.headers)
        out = []
        for choice in answer.choices:  # the JSON as sent: declared fields, then vLLM's own
            vllm = choice.model_extra or {}
            out.append({**choice.model_dump(exclude_unset=True, exclude=set(vllm),
                                            warnings=False), **vllm})
        return out


class SdkExtraClient(SdkClient):
    everything_in_extra_body = True


KINDS: dict[str, type[ServerClient]] = {"httpx": ServerClient, "sdk": SdkClient,
                                        "sdk-extra": SdkExtraClient}


def _pass(positions: int, k: int = 20) -> dict[str, Any]:
    """A verification pass's answer: `prompt_logprobs` (top k + the token) at every position."""
    rows = [{str(random.randrange(150000)): {"logprob": -random.random(), "rank": r + 1,
                                             "decoded_token": "ab"} for r in range(k + 1)}
            for _ in range(positions - 1)]
    top = {f"token_id:{random.randrange(150000)}": -random.random() for _ in range(k)}
    choice = {"index": 0, "text": "x", "finish_reason": "length", "stop_reason": None,
              "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.1],
                           "top_logprobs": [top], "text_offset": [0]},
              "prompt_logprobs": [None, *rows]}
    return {"id": "c", "object": "text_completion", "created": 1, "model": "m",
            "choices": [choice]}


def _write(n: int, tokens: int) -> dict[str, Any]:
    """A written step's answer: `n` choices of `tokens` tokens with their log-probs."""
    choices = [{"index": i, "text": "x" * tokens, "finish_reason": "stop", "stop_reason": "\n\n",
                "logprobs": {"tokens": [f"token_id:{j}" for j in range(tokens)],
                             "token_logprobs": [-0.5] * tokens,
                             "top_logprobs": [{f"token_id:{j}": -0.5} for j in range(tokens)],
                             "text_offset": list(range(tokens))}, "prompt_logprobs": None}
               for i in range(n)]
    return {"id": "c", "object": "text_completion", "created": 1, "model": "m",
            "choices": choices}


random.seed(0)
RAW = {key: json.dumps(answer).encode() for key, answer in {
    "small": {"id": "c", "object": "text_completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}]},
    "pass200": _pass(200), "pass1000": _pass(1000), "write1x64": _write(1, 64),
    "write4x256": _write(4, 256)}.items()}


def compare(label: str, clients: dict[str, ServerClient],
            call: Callable[[ServerClient], object], number: int, rounds: int = 7) -> None:
    times: dict[str, list[float]] = {kind: [] for kind in clients}
    for client in clients.values():
        call(client)
    for _ in range(rounds):
        for kind, client in clients.items():
            times[kind].append(timeit.timeit(lambda c=client: call(c), number=number) / number)
    base = min(times["httpx"])
    cells = [f"{kind} {min(t) * 1e3:7.2f} ({statistics.median(t) * 1e3:7.2f})"
             + ("" if kind == "httpx" else f" {(min(t) - base) * 1e3:+7.2f}")
             for kind, t in times.items()]
    print(f"{label:34s} " + " | ".join(cells), flush=True)


def body(prompt_len: int) -> dict[str, Any]:
    return {"prompt": list(range(prompt_len)), "max_tokens": 1, "logprobs": 20,
            "return_tokens_as_token_ids": True}


def serve(kind: str, port: int) -> None:
    if kind == "fake":
        from tests.fixtures import load_pair
        from tests.specguard_core.remote.vllm_helpers import FakeVLLM

        pair = load_pair(Path(tempfile.mkdtemp()))
        app = FakeVLLM(pair[2], pair[3], name="tiny-target").app()
    else:
        app = FastAPI()

        @app.post("/v1/completions")
        async def complete(request: Request) -> Response:
            await request.body()
            return Response(RAW[request.headers["x-answer"]], media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def started(kind: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"the {kind} server did not start")


def main(modes: list[str]) -> None:
    print("ms per call: min (median) over 7 rounds, then the SDK's min minus httpx's min")
    if "mock" in modes:
        print("no network (httpx.MockTransport):")
        for key, prompt_len, number in (("small", 8, 300), ("small", 1000, 30),
                                        ("small", 4000, 10), ("pass200", 200, 10),
                                        ("write4x256", 1000, 20)):
            mock = httpx.MockTransport(lambda _, raw=RAW[key]: httpx.Response(
                200, content=raw, headers={"content-type": "application/json"}))
            clients = {kind: cls("http://vllm.test/v1", "m", timeout_s=30, transport=mock)
                       for kind, cls in KINDS.items()}
            sent = body(prompt_len)
            compare(f"{key}, prompt {prompt_len}", clients,
                    lambda c, b=sent: c.complete(b, "verify"), number)
    if "canned" in modes:
        proc = started("canned", 18771)
        try:
            print("canned answers (uvicorn in another process, 127.0.0.1):")
            for key, prompt_len, number in (("small", 8, 100), ("small", 1000, 20),
                                            ("pass200", 200, 10), ("pass1000", 1000, 4),
                                            ("write1x64", 500, 20), ("write4x256", 1000, 10)):
                clients = {kind: cls("http://127.0.0.1:18771/v1", "m", timeout_s=30)
                           for kind, cls in KINDS.items()}
                for client in clients.values():
                    client._client.headers["x-answer"] = key
                sent = body(prompt_len)
                compare(f"{key} ({len(RAW[key]) // 1024} KiB), prompt {prompt_len}", clients,
                        lambda c, b=sent: c.complete(b, "verify"), number)
        finally:
            proc.terminate()
    if "fake" in modes:
        proc = started("fake", 18772)
        try:
            print("FakeVLLM (tiny random target, in another process, 127.0.0.1):")
            clients = {kind: cls("http://127.0.0.1:18772/v1", "tiny-target", timeout_s=30)
                       for kind, cls in KINDS.items()}
            compare("GET /v1/models", clients, lambda c: c.models(), 20)
            prefix = list(range(5, 45))
            compare("pass: 48 ids, prompt_logprobs=20", clients, lambda c: c.complete(
                {"prompt": prefix + [7] * 8, "max_tokens": 1, "temperature": 0.0,
                 "logprobs": 20, "return_tokens_as_token_ids": True, "prompt_logprobs": 20},
                "verify"), 10)
            compare("write: 40 ids, max_tokens=8", clients, lambda c: c.complete(
                {"prompt": prefix, "max_tokens": 8, "stop": ["\n\n"], "logprobs": 0,
                 "return_tokens_as_token_ids": True, "temperature": 0.0}, "write"), 5)
        finally:
            proc.terminate()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1:] or ["mock", "canned", "fake"])
