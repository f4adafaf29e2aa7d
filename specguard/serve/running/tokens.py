"""vLLM's tokenizer and version endpoints over the served engine's target tokenizer:
`POST /tokenize` (a text, or a conversation rendered as a chat request renders it),
`POST /detokenize`, `GET /tokenizer_info` (the special tokens, the chat template and the context
window: what lm-eval's remote tokenizer reads) and `GET /version`. A remote tokenizer (lm-eval,
SpecGuard's own served target) then needs no copy of the model's tokenizer."""

from __future__ import annotations

import asyncio
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request

from specguard.serve.api import checks, convert
from specguard.serve.api.tokenize import DetokenizeRequest, TokenizeRequest
from specguard.serve.http.errors import client_safe
from specguard.serve.http.intake import authorise, check_model, parse_body, sent
from specguard.serve.http.settings import ServeSettings
from specguard.serve.http.slots import APIError
from specguard_core.text.chat import InputError, RawPrompt

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine


def _version() -> str:
    try:
        return version("specguard")
    except PackageNotFoundError:
        return "0+unknown"


def _tokenize(engine: SpecGuardEngine, req: TokenizeRequest) -> list[int]:
    if req.prompt is not None:
        if not req.prompt:
            return []
        return engine.prompt_ids(RawPrompt(req.prompt, None, req.add_special_tokens is not False))
    return engine.prompt_ids(convert.engine_messages(req.messages or []), req.tools,
                             req.chat_template_kwargs, req.continuation())


def tokenizer_info(engine: SpecGuardEngine) -> dict[str, Any]:
    """The target tokenizer's special tokens, chat template and the context window."""
    tok = engine.target.tokenizer
    return {"tokenizer_class": type(tok).__name__, "eos_token": tok.eos_token,
            "bos_token": tok.bos_token, "pad_token": tok.pad_token,
            "chat_template": getattr(tok, "chat_template", None),
            "model_max_length": engine.context_window}


def add_token_routes(app: FastAPI, engine: SpecGuardEngine, settings: ServeSettings,
                     model_name: str) -> None:
    """Serve /tokenize, /detokenize, /tokenizer_info and /version on `app`."""
    vocab = len(engine.target.tokenizer)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        req = await parse_body(settings, request, TokenizeRequest)
        check_model(req.model, model_name)
        bad = req.problems() + checks.template_problems(req.chat_template_kwargs)
        for param, why in bad:
            raise APIError(400, why, param=param, code="unsupported_parameter")
        try:
            ids = await asyncio.to_thread(_tokenize, engine, req)
        except InputError as err:
            raise APIError(400, client_safe(str(err), sent(request))) from None
        strs = [engine.target.decode([t]) for t in ids] if req.return_token_strs else None
        return {"count": len(ids), "max_model_len": engine.context_window, "tokens": ids,
                "token_strs": strs}

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict[str, Any]:
        req = await parse_body(settings, request, DetokenizeRequest)
        check_model(req.model, model_name)
        if any(not 0 <= t < vocab for t in req.tokens):
            raise APIError(400, f"tokens holds an id outside the vocabulary (0 to {vocab - 1})",
                           param="tokens")
        return {"prompt": engine.target.decode(list(req.tokens))}

    @app.get("/tokenizer_info")
    async def info(request: Request) -> dict[str, Any]:
        authorise(settings, request)
        return tokenizer_info(engine)

    @app.get("/version")
    async def served_version() -> dict[str, str]:
        return {"version": _version()}
