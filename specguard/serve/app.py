"""`create_app(engine, settings)`: the OpenAI-compatible HTTP API over one `SpecGuardEngine`.

Each request passes the middlewares (`guard.Guard`: Host, Origin; Starlette's `CORSMiddleware`
for the allowed origins; `guard.BodyGuard`: media type, body size), is authorised and validated
(`intake`), then runs through the engine (`generation`). Every error is OpenAI's error JSON, an
unexpected one and a path this server does not serve included; a server-side failure's details
(which may hold paths, internal model names or a target URL's credentials) go to the log only.

`slots.Slots` is the one seam for concurrency (`max_concurrent`; `specguard serve`, which batches
by default, widens it to the batching engine's `max_active_requests`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from openai.types import Completion
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from specguard.serve.api import completions as completions_api
from specguard.serve.api import convert
from specguard.serve.api.protocol import ChatCompletionRequest, CompletionRequest, error_body
from specguard.serve.api.untrusted import redact
from specguard.serve.http.errors import client_safe
from specguard.serve.http.guard import BodyGuard, Guard
from specguard.serve.http.intake import authorise, parse, sent
from specguard.serve.http.metrics import Metrics, outcome_of
from specguard.serve.http.settings import ServeSettings
from specguard.serve.http.slots import APIError, Slots
from specguard.serve.running.generation import Call, Generation
from specguard.serve.running.streaming import JSONBody
from specguard.serve.running.tokens import add_token_routes
from specguard_core.text import formats
from specguard_core.text.chat import InputError, RawPrompt, continues
from specguard_core.types import GenerationResult

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine

__all__ = ["ServeSettings", "create_app"]
log = logging.getLogger("specguard.serve")
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
SERVED = ("POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST /tokenize, "
          "POST /detokenize, GET /tokenizer_info, GET /version, GET /health, GET /metrics")
# OpenAI and vLLM endpoints a client may try: named in the 404 (any other path is not repeated)
KNOWN = ("/v1/responses", "/v1/embeddings", "/v1/audio", "/v1/images", "/v1/moderations",
         "/v1/files", "/v1/batches", "/v1/fine_tuning", "/v1/assistants", "/v1/threads",
         "/v1/vector_stores", "/v1/uploads", "/v1/realtime", "/v1/conversations", "/v1/rerank",
         "/v1/score", "/v1/tokenize", "/v1/detokenize", "/pooling", "/classify", "/rerank",
         "/score", "/v1/messages")
RESPONSES = ("; the Responses API is not served (docs/decisions/no-responses-api.md): "
             "use /v1/chat/completions")


def not_served(path: str) -> str:
    """The 404's message: the endpoint asked for when it is a known one, and the ones served."""
    known = next((k for k in KNOWN if path == k or path.startswith(k + "/")), None)
    what = f"{known} is not an endpoint of this server" if known else \
        "this server has no endpoint at this path"
    return f"{what}; it serves {SERVED}" + (RESPONSES if known == "/v1/responses" else "")


def create_app(engine: SpecGuardEngine, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engine`: /v1/chat/completions, /v1/completions, /v1/models,
    /health, /metrics. Errors are OpenAI's error JSON."""
    settings = settings or ServeSettings()
    model_name, created = settings.model_name or engine.model_name, int(time.time())
    slots = Slots(settings.max_concurrent, settings.max_queue, settings.queue_poll_s)
    metrics = Metrics(slots)
    gen = Generation(engine, settings, slots, metrics, model_name)

    app = FastAPI(title="SpecGuard", description="OpenAI-compatible API over a SpecGuard engine",
                  default_response_class=JSONBody)
    app.state.slots, app.state.metrics = slots, metrics
    # the last added runs first: Guard, then CORS, then the body's checks
    app.add_middleware(BodyGuard, max_body_bytes=settings.limits.max_body_bytes)
    if settings.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.allowed_origins),
                           allow_methods=list(settings.allowed_methods),
                           allow_headers=list(settings.allowed_headers),
                           allow_credentials=settings.allow_credentials,
                           allow_private_network=True)
    app.add_middleware(Guard, allowed_hosts=settings.host_allow_list(),
                       allowed_origins=frozenset(settings.allowed_origins))

    @app.exception_handler(APIError)
    async def _api_error(request: Request, err: APIError) -> JSONResponse:
        if (endpoint := ENDPOINTS.get(request.url.path)) is not None:
            metrics.ended(endpoint, outcome_of(err.status))
        return JSONBody(err.body, status_code=err.status, headers=err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 404:
            return JSONBody(error_body(not_served(request.url.path), "not_found_error", None,
                                       "unknown_endpoint"), status_code=404)
        message = "this method is not allowed on this endpoint (the Allow header lists those " \
            "that are)" if err.status_code == 405 else str(err.detail)
        return JSONBody(error_body(message, "invalid_request_error"), status_code=err.status_code,
                        headers=err.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception) -> JSONResponse:
        log.error("unexpected error: %s", redact(f"{type(err).__name__}: {err}"))
        return JSONBody(error_body("internal server error; the server's log has the details",
                                   "server_error"), status_code=500)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        arrived = time.monotonic()
        req = await parse(settings, model_name, request, ChatCompletionRequest)
        cfgs = gen.configs(req, request)
        try:
            messages = await run_in_threadpool(convert.engine_messages, req.messages)
        except InputError as err:
            raise APIError(400, client_safe(str(err), sent(request)), param="messages") from None
        kwargs: dict[str, Any] = {"tools": req.tools, "tool_choice": req.tool_choice or "auto",
                                  "continue_final_message": req.continuation(),
                                  "top_logprobs": (req.top_logprobs or 0) if req.logprobs else 0}
        try:  # vLLM's echo: the reply starts with the assistant message it continues
            continued = continues(messages, req.continuation())
        except InputError as err:
            raise APIError(400, str(err), param="continue_final_message") from None
        echo = str(messages[-1]["content"]) if req.echo and continued else ""
        if req.chat_template_kwargs:
            kwargs["chat_template_kwargs"] = req.chat_template_kwargs
        if req.parallel_tool_calls is False:  # the reply ends with its first call
            kwargs["parallel_tool_calls"] = False
        # the model is told the format, and the engine constrains every token to its grammar
        # (or, with specguard.response_format_mode="check", checks the answer steps against it)
        if req.response_format and (instruction := formats.format_instruction(
                req.response_format)):
            messages = formats.with_instruction(messages, instruction)
            kwargs["response_format"] = req.response_format
        if req.structured_outputs is not None:  # vLLM's: the constraint alone, no instruction
            kwargs["structured_outputs"] = {k: v for k, v in req.structured_outputs.items()
                                            if k in formats.STRUCTURED}
        lease = await gen.open(request, [messages], cfgs, **kwargs)
        call = Call("chat", req, lease, arrived, gen.chat_build(bool(req.logprobs), echo),
                    (req.top_logprobs or 0) if req.logprobs else None, (echo,), req.choices)
        return await gen.reply(request, call, cfgs[0], "chatcmpl", "chat.completion.chunk")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        arrived = time.monotonic()
        req = await parse(settings, model_name, request, CompletionRequest)
        cfgs = gen.configs(req, request)
        special = req.add_special_tokens is not False
        prompts = [RawPrompt(p, None, special) if isinstance(p, str) else
                   RawPrompt(None, tuple(p), special) for p in req.prompts()]
        scored = "only" if req.max_tokens == 0 else bool(req.echo and req.logprobs is not None)
        try:
            lease = await gen.open(request, prompts, cfgs, prompt_logprobs=scored,
                                   top_logprobs=req.logprobs or 0)
        except APIError as err:  # the engine's errors about "the prompt" are about `prompt` here
            if err.body["error"]["param"] == "messages":
                err.body["error"]["param"] = "prompt"
            raise
        texts = tuple(p.text if p.text is not None else engine.target.decode(list(p.token_ids or
                                                                                   ()))
                      for p in prompts)
        shape = completions_api.Shape(bool(req.echo), req.logprobs)

        def build(results: list[GenerationResult], rid: str, model: str) -> Completion:
            return completions_api.response(results, texts, req.choices, rid, model, shape,
                                            engine.token_text)
        call = Call("completions", req, lease, arrived, build, req.logprobs,
                    texts if req.echo else (), req.choices)
        return await gen.reply(request, call, cfgs[0], "cmpl", "text_completion")

    card = {"id": model_name, "object": "model", "created": created, "owned_by": "specguard",
            "max_model_len": engine.context_window,
            "specguard": {"draft": redact(engine.draft.name), "target": redact(engine.target.name),
                          "context_window": engine.context_window}}
    add_token_routes(app, engine, settings, model_name)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        authorise(settings, request)
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request, model_id: str) -> dict[str, Any]:
        authorise(settings, request)
        if model_id != model_name:
            raise APIError(404, f"the model asked for does not exist; this server serves "
                           f"{model_name!r}", "not_found_error", "model", "model_not_found")
        return card

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "running": slots.running,
                "queued": slots.admitted - slots.running, "max_concurrent": slots.max_concurrent,
                "max_queue": slots.max_queue}

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        authorise(settings, request)
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
