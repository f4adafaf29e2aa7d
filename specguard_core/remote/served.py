"""A model on a vLLM server as the engine knows it: its address, its name, its tokenizer.

`ServedModel` holds the local tokenizer (ids are encoded and decoded here, never by the server)
and the HTTP client (`http.ServerClient`). `connect` asks the server what it serves
(`/v1/models`: the model, its `max_model_len`) and checks that it tokenizes as the local tokenizer
does (`/tokenize` on a probe string), so a server that serves another model or tokenizer is a
`RemoteTargetError` that says what to pass, before any step runs. What the target does with it
(passes over tokens, writing a step) is `target.RemoteTarget`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import httpx

from specguard_core.remote.http import RemoteTargetError, ServerClient

PROBE = ("SpecGuard tokenizer probe: Hello, world! 3.14159 == pi; naïve café, 数学, 🙂\n\n"
         "def f(x):\n    return x ** 2  # done\n")

S = TypeVar("S", bound="ServedModel")


class ServedModel:
    """A model served by vLLM at `url` (`http://HOST:PORT/v1`) under the name `model`.

    `tokenizer` must be the served model's (checked by `connect`); `context_window` is the
    server's `max_model_len`; `vocab_size` the width of the logits rows (the draft's, so the two
    compare). Constructing one touches no network; `connect` asks the server and checks it."""

    def __init__(self, url: str, model: str, tokenizer: Any, *, context_window: int,
                 eos_ids: Iterable[int] | None = None, vocab_size: int | None = None,
                 timeout_s: float = 120.0, top_logprobs: int = 20, api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"target URL {url!r} must start with http:// or https://, e.g. "
                             "http://127.0.0.1:8000/v1")
        if not timeout_s > 0 or top_logprobs < 1:
            raise ValueError("timeout_s must be > 0 and top_logprobs >= 1")
        self.http = ServerClient(url, model, timeout_s=timeout_s, api_key=api_key,
                                 transport=transport)
        self.url = self.http.url
        self.name = f"{model}@{self.url}"
        self.tokenizer = tokenizer
        self.context_window = int(context_window)
        eos = [tokenizer.eos_token_id] if eos_ids is None else list(eos_ids)
        self.eos_ids = frozenset(int(e) for e in eos if e is not None)
        self.vocab_size = max(int(vocab_size or 0), len(tokenizer))
        self.top_logprobs = int(top_logprobs)

    @property
    def model_name(self) -> str:
        """The served model's name, as every request names it."""
        return self.http.model

    @model_name.setter
    def model_name(self, value: str) -> None:
        self.http.model = value

    @property
    def timeout_s(self) -> float:
        return self.http.timeout_s

    @property
    def root(self) -> str:
        """The server's root (vLLM serves `/tokenize` beside `/v1`)."""
        return self.http.root

    @classmethod
    def connect(cls: type[S], url: str, model: str | None, tokenizer: Any, **kwargs: Any) -> S:
        """Ask the server at `url` what it serves (`/v1/models`: the model, its `max_model_len`)
        and check it tokenizes as `tokenizer` does (`/tokenize` on a probe string). `model=None`
        takes the one model served. Keywords: those of the constructor but `context_window`."""
        target = cls(url, model or "", tokenizer, context_window=0, **kwargs)
        try:
            target._check_model(model)
            target.check_tokenizer()
        except BaseException:
            target.close()
            raise
        return target

    def _check_model(self, model: str | None) -> None:
        """Take `model` (or the one model served) and its `max_model_len` from `/v1/models`."""
        served = self.http.models()
        if model is None and len(served) == 1:
            model = next(iter(served))
        if model not in served:
            raise RemoteTargetError(f"the server at {self.url} serves {sorted(served)}, not "
                                    f"{model!r}; pass target_model= (CLI: --target-model) with "
                                    "one of those names")
        self.model_name, self.name = model, f"{model}@{self.url}"
        window = served[model].get("max_model_len")
        if window is not None and not _sane_window(window) and window != 0:
            raise RemoteTargetError(f"the server at {self.url} reports a context window "
                                    f"(max_model_len) of {str(window)[:40]!r} for {model!r}, "
                                    "not a number of tokens; is it vLLM? Restart it with "
                                    "--max-model-len set to the model's window")
        # not reported: the local tokenizer's limit (transformers' "no limit" sentinel, about
        # 1e30, is none), else 0: no window known
        local = getattr(self.tokenizer, "model_max_length", 0)
        self.context_window = int(window) if window else local if _sane_window(local) else 0

    def check_tokenizer(self) -> None:
        """Raise RemoteTargetError if the server tokenizes `PROBE` differently from the local
        tokenizer (it serves another model family or tokenizer)."""
        theirs, ours = self.http.tokenize(PROBE, "tokenize the probe"), self.encode(PROBE)
        if theirs != ours:
            raise RemoteTargetError(
                f"the server at {self.url} serves {self.model_name!r} with another tokenizer than "
                f"the local one ({len(ours)} vs {len(theirs or [])} tokens for a probe string); "
                "pass target_tokenizer= (CLI: --target-tokenizer) with the served model's folder")

    def close(self) -> None:
        self.http.close()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


def _sane_window(value: object) -> bool:
    """Whether `value` is a plausible context window: a whole number of tokens below 2**31."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31
