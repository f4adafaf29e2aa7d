"""A fake vLLM server for the remote-target tests, and the real one for the opt-in tests.

`FakeVLLM` answers what `RemoteTarget` asks, shaped as vLLM 0.32 answers it: `GET /v1/models`
(with `max_model_len`), `POST /tokenize`, `POST /v1/completions` with token-id prompts, `n`,
`max_tokens`, `stop` (+ `include_stop_str_in_output`), `stop_token_ids`, `seed`, `temperature`,
`top_p`, `prompt_logprobs`, `logprobs`, `return_tokens_as_token_ids` and `return_token_ids`.
It is backed by an in-process causal LM (a tiny transformers model or a `ScriptedLM`), one full
forward per token (no cache), so its numbers are the model's own. As in vLLM, the token that
stops generation (EOS, a stop token, the one completing a stop string) is kept in the output
ids, and errors come as `{"error": {"message", "type", "code"}}`.

`real_vllm_server` starts `scripts/vllm_target.sh serve` and waits for it (opt-in tests).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[3]


class FakeVLLM:
    """A vLLM look-alike over `model`/`tokenizer`. `served_tokenizer` (default `tokenizer`)
    answers /tokenize, to play a server with another tokenizer; `delay_s` makes every
    completion slow (waited concurrently, as a server batching its requests would);
    `requests` records the completion bodies and `spans` their (arrival, answer) times."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "fake-target",
                 max_model_len: int = 512, served_tokenizer: Any = None, delay_s: float = 0.0,
                 max_logprobs: int = 20) -> None:
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        self.served_tokenizer = served_tokenizer or tokenizer
        self.max_model_len, self.delay_s, self.max_logprobs = max_model_len, delay_s, max_logprobs
        self.eos = int(tokenizer.eos_token_id)
        self.requests: list[dict[str, Any]] = []
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def app(self) -> Any:
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.name, "object": "model",
                                                "owned_by": "vllm", "root": self.name,
                                                "max_model_len": self.max_model_len}]}

        @app.post("/tokenize")
        async def tokenize(request: Request) -> dict[str, Any]:
            body = await request.json()
            ids = self.served_tokenizer(body["prompt"], add_special_tokens=bool(
                body.get("add_special_tokens", True)))["input_ids"]
            return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            arrival = time.monotonic()
            body = await request.json()
            self.requests.append(body)
            problem = self._problem(body)
            if problem:
                return JSONResponse({"error": {"message": problem, "type": "BadRequestError",
                                               "param": None, "code": 400}}, status_code=400)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            with self._lock:
                answer = self._complete(body)
            self.spans.append((arrival, time.monotonic()))
            return answer

        return app

    def _problem(self, body: dict[str, Any]) -> str | None:
        prompt = body.get("prompt")
        if body.get("model") != self.name:
            return f"The model `{body.get('model')}` does not exist."
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            return "this fake takes token-id prompts only"
        if any(not 0 <= t < len(self.tokenizer) for t in prompt):
            return "Token id out of vocabulary"
        asked = len(prompt) + int(body.get("max_tokens", 16))
        if asked > self.max_model_len:
            return (f"This model's maximum context length is {self.max_model_len} tokens. "
                    f"However, you requested {asked} tokens.")
        for key in ("logprobs", "prompt_logprobs"):
            if (body.get(key) or 0) > self.max_logprobs:
                return f"Requested {key} of {body[key]}, which is greater than max allowed: 20"
        return None

    @torch.inference_mode()
    def _logprobs(self, ids: list[int], all_positions: bool) -> torch.Tensor:
        """Log-probs `[P or 1, V]` after each prefix of `ids` (full forward, no cache)."""
        out = self.model(input_ids=torch.tensor([ids]), logits_to_keep=0 if all_positions else 1,
                         use_cache=False)
        return torch.log_softmax(out.logits[0].float(), dim=-1)

    def _complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt: list[int] = body["prompt"]
        k_prompt, k_out = body.get("prompt_logprobs"), body.get("logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        rows = self._logprobs(prompt, k_prompt is not None)  # [P or 1, V]
        prompt_lp: list[Any] | None = None
        if k_prompt is not None:
            prompt_lp = [None] + [_top(rows[i - 1], k_prompt, prompt[i], self.tokenizer, False)
                                  for i in range(1, len(prompt))]
        choices = [self._choice(i, prompt, rows[-1], body, k_out, as_ids)
                   for i in range(int(body.get("n", 1)))]
        for choice in choices:
            choice["prompt_logprobs"] = prompt_lp
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.name,
                "choices": choices, "usage": {"prompt_tokens": len(prompt)}}

    def _choice(self, index: int, prompt: list[int], first: torch.Tensor, body: dict[str, Any],
                k_out: int | None, as_ids: bool) -> dict[str, Any]:
        temperature = float(body.get("temperature") or 0.0)
        top_p = float(body.get("top_p") or 1.0)
        gen = torch.Generator().manual_seed(int(body.get("seed") or 0) + index)
        stops = list(body.get("stop") or [])
        stop_ids = set(body.get("stop_token_ids") or [])
        out: list[int] = []
        logprobs: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                          "text_offset": []}
        finish, reason, text, row = "length", None, "", first
        for _ in range(int(body.get("max_tokens", 16))):
            tok = _pick(row, temperature, top_p, gen)
            out.append(tok)
            if k_out is not None:
                name = f"token_id:{tok}" if as_ids else self.tokenizer.decode([tok])
                logprobs["tokens"].append(name)
                logprobs["token_logprobs"].append(float(row[tok]))
                logprobs["top_logprobs"].append(_top(row, k_out, tok, self.tokenizer, as_ids))
            if tok == self.eos or tok in stop_ids:
                finish, reason = "stop", (tok if tok in stop_ids and tok != self.eos else None)
                break
            text = self.tokenizer.decode(out, skip_special_tokens=bool(
                body.get("skip_special_tokens", True)))
            hit = min(((text.find(s), s) for s in stops if s in text), default=None)
            if hit is not None:
                cut = hit[0] + (len(hit[1]) if body.get("include_stop_str_in_output") else 0)
                finish, reason, text = "stop", hit[1], text[:cut]
                break
            row = self._logprobs(prompt + out, False)[-1]
        choice: dict[str, Any] = {"index": index, "text": text, "finish_reason": finish,
                                  "stop_reason": reason,
                                  "logprobs": logprobs if k_out is not None else None}
        if body.get("return_token_ids"):
            choice["token_ids"] = out
        return choice


def _pick(row: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator) -> int:
    if temperature == 0:
        return int(row.argmax())
    probs = torch.softmax(row / temperature, dim=-1)
    sorted_p, order = probs.sort(descending=True)
    sorted_p[(sorted_p.cumsum(0) - sorted_p) > top_p] = 0.0
    return int(order[torch.multinomial(sorted_p, 1, generator=gen)])


def _top(row: torch.Tensor, k: int, actual: int, tokenizer: Any, as_ids: bool) -> dict[Any, Any]:
    """vLLM's per-position entry: the top `k` tokens and `actual` with their log-probs (prompt
    entries keyed by id with logprob/rank/decoded_token; output entries keyed by token)."""
    values, ids = row.topk(k)
    picked = dict(zip(ids.tolist(), values.tolist(), strict=True))
    picked[actual] = float(row[actual])
    if as_ids:
        return {f"token_id:{i}": v for i, v in picked.items()}
    ranks = {i: int((row > row[i]).sum()) + 1 for i in picked}
    return {str(i): {"logprob": v, "rank": ranks[i], "decoded_token": tokenizer.decode([i])}
            for i, v in picked.items()}


# ---- the real vLLM server (opt-in) ---------------------------------------------------------
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_NAME = "qwen2.5-coder-1.5b-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def real_vllm_server(log: Path, startup_s: float = 480.0) -> Iterator[str]:
    """`scripts/vllm_target.sh serve` on a free port (the cached 1.5B target); yields the /v1
    URL once /v1/models answers; stops the server (its process group) when the block ends."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([str(ROOT / "scripts" / "vllm_target.sh"), "serve", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not answer within {startup_s:.0f}s; see {log}")
            time.sleep(2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


@contextmanager
def served_target(target_dir: Path, name: str = "served") -> Iterator[str]:
    """The model in `target_dir` (float32) behind a `FakeVLLM` on 127.0.0.1; yields its /v1 URL."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.specguard.serve.serve_helpers import live_server

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    fake = FakeVLLM(model, AutoTokenizer.from_pretrained(target_dir), name=name)
    with live_server(fake.app()) as base:
        yield f"{base}/v1"
