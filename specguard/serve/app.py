"""`create_app(engine, settings)`: the OpenAI-compatible HTTP API over one `SpecGuardEngine`.

Each request: pass the `Guard` (Host, Origin, media type, body size), authorise, validate (400s:
`protocol.py`, within the operator's `Limits`), admit (503 when `max_concurrent + max_queue`
requests are already in), validate against the engine (`engine.stream` checks messages, tools and
the context window eagerly, on a worker thread), wait for a slot, then iterate the engine's steps
on a worker thread of its own (`iterate_in_thread`); the event loop only moves bytes. A streamed
request's generation runs in a task of its own (`streaming.Relay`): the slot is held while the
engine works, not while a slow reader drains. A client that leaves (mid-stream, or while queued)
closes its `GenerationStream` and frees its slot.

Every error is OpenAI's error JSON, an unexpected one included; a server-side failure's details
(which may hold paths, internal model names or a target URL's credentials) go to the log only.

`slots.Slots` is the one seam for concurrency (`max_concurrent`; `specguard serve`, which batches
by default, widens it to the batching engine's `max_active_requests`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from specguard.serve import convert
from specguard.serve.errors import failure, validation_message
from specguard.serve.extension import Limits
from specguard.serve.guard import LOOPBACK, Guard
from specguard.serve.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ErrorType,
    error_body,
)
from specguard.serve.slots import APIError, ClientGone, Lease, Slots
from specguard.serve.streaming import EventStream, JSONBody, Put, Relay
from specguard.serve.untrusted import body_problem, redact
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.text import formats
from specguard_core.text.chat import InputError

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine

log = logging.getLogger("specguard.serve")


@dataclass(frozen=True)
class ServeSettings:
    """Server knobs (the engine's per-request defaults stay in `engine.config`)."""

    api_key: str | None = None  # None: no authentication (and only loopback Host names)
    max_concurrent: int = 1  # requests iterating the engine at once
    max_queue: int = 16  # requests waiting for a slot; one more gets 503
    model_name: str | None = None  # the served model id; default: engine.model_name
    queue_poll_s: float = 0.5  # how often a queued request checks that its client is still there
    limits: Limits = field(default_factory=Limits)  # what a client may send and ask for
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides the loopback ones; with
    # an api_key and none given, any Host is answered
    allowed_origins: tuple[str, ...] = ()  # browser origins allowed besides the server's own

    def __post_init__(self) -> None:
        if self.max_concurrent < 1 or self.max_queue < 0:
            raise ValueError("max_concurrent must be >= 1 and max_queue >= 0")

    def host_allow_list(self) -> frozenset[str] | None:
        if self.api_key is not None and not self.allowed_hosts:
            return None
        return LOOPBACK | {h.lower() for h in self.allowed_hosts}


def create_app(engine: SpecGuardEngine, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engine`: /v1/chat/completions, /v1/completions, /v1/models,
    /health. Errors are OpenAI's error JSON."""
    settings = settings or ServeSettings()
    limits, model_name, created = settings.limits, settings.model_name or engine.model_name, \
        int(time.time())
    slots = Slots(settings.max_concurrent, settings.max_queue, settings.queue_poll_s)
    takes_format = "response_format" in inspect.signature(engine.stream).parameters

    app = FastAPI(title="SpecGuard", description="OpenAI-compatible API over a SpecGuard engine",
                  default_response_class=JSONBody)
    app.state.slots = slots
    app.add_middleware(Guard, allowed_hosts=settings.host_allow_list(),
                       allowed_origins=frozenset(settings.allowed_origins),
                       max_body_bytes=limits.max_body_bytes)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, err: APIError) -> JSONResponse:
        return JSONBody(err.body, status_code=err.status, headers=err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        type_: ErrorType = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return JSONBody(error_body(str(err.detail), type_), status_code=err.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception) -> JSONResponse:
        log.error("unexpected error: %s", redact(f"{type(err).__name__}: {err}"))
        return JSONBody(error_body("internal server error; the server's log has the details",
                                   "server_error"), status_code=500)

    def authorise(request: Request) -> None:
        if settings.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(key.strip().encode(),
                                                                    settings.api_key.encode()):
            raise APIError(401, "invalid or missing API key; send 'Authorization: Bearer <key>' "
                           "with the key given to `specguard serve --api-key`",
                           "authentication_error", code="invalid_api_key")

    async def parse(request: Request, model: type[ChatCompletionRequest] | type[CompletionRequest]
                    ) -> Any:
        authorise(request)
        try:
            body = json.loads(await request.body())
        except UnicodeDecodeError:
            raise APIError(400, "the request body is not UTF-8 text") from None
        except RecursionError:
            raise APIError(400, "the request body is nested too deeply; flatten it") from None
        except json.JSONDecodeError:
            raise APIError(400, "the request body is not valid JSON") from None
        except ValueError:  # Python's limit on the digits of an integer (4300)
            raise APIError(400, "the request body holds an integer too long to read (over 4300 "
                           "digits)") from None
        if not isinstance(body, dict):
            raise APIError(400, "the request body must be a JSON object")
        if problem := body_problem(body):
            raise APIError(400, problem[0], param=problem[1])
        try:
            req = model.model_validate(body)
        except ValidationError as err:
            message, param = validation_message(err)
            raise APIError(400, message, param=param) from None
        for param, why in [*req.unsupported(), *req.problems(limits)]:
            raise APIError(400, why, param=param, code="unsupported_parameter")
        if req.model != model_name:
            raise APIError(404, f"the model named in the request does not exist; this server "
                           f"serves {model_name!r} (GET /v1/models)", "not_found_error", "model",
                           "model_not_found")
        return req

    def config_for(req: ChatCompletionRequest | CompletionRequest) -> list[SpecGuardConfig]:
        """One config per choice (`n`), seeds seed, seed+1, ..."""
        try:
            return convert.choice_configs(convert.request_config(engine.config, req, limits),
                                          req.choices)
        except ValueError as err:
            raise APIError(400, str(err), param="specguard" if req.specguard else None) from None

    async def open_stream(messages: Any, cfgs: list[SpecGuardConfig], **kwargs: Any) -> Lease:
        """Admit (one place for all choices), then open the engine's streams: `engine.stream`
        validates eagerly (tokenises the prompt), on a worker thread, not on the event loop."""
        slots.admit()
        try:
            streams = await asyncio.to_thread(
                lambda: [engine.stream(messages, config=cfg, **kwargs) for cfg in cfgs])
            return Lease(slots, streams)
        except BaseException as err:
            slots.leave()
            if isinstance(err, Exception):
                raise failure(err) from None
            raise

    async def run(request: Request, stream: GenerationStream) -> None:
        """Iterate to the end (non-streaming); stops early if the client leaves."""
        async with slots.slot(request):
            async for _ in iterate_in_thread(lambda: stream, stream.close, name="specguard-serve"):
                if await request.is_disconnected():
                    raise ClientGone()

    async def respond(request: Request, lease: Lease, build: Any, rid: str) -> Any:
        try:
            for stream in lease.streams:  # the choices, one run after another
                await run(request, stream)
        except ClientGone:
            return JSONBody(error_body("client disconnected", "invalid_request_error"), 499)
        except Exception as err:  # noqa: BLE001 - answered as OpenAI's error JSON
            raise failure(err) from None
        finally:
            lease.release()
        results = [stream.result for stream in lease.streams]
        return JSONBody(convert.merge_choices([build(r, rid, model_name) for r in results],
                                              results))

    async def reply(request: Request, req: Any, lease: Lease, cfg: SpecGuardConfig, prefix: str,
                    obj: str, build: Any) -> Any:
        """The answer to an opened request: SSE events when it asked to stream, else one body."""
        rid = convert.new_id(prefix)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            one_call = getattr(req, "parallel_tool_calls", None) is False
            return EventStream(Relay(partial(produce, request, lease, rid, obj, cfg.stop,
                                             include_usage, one_call)), lease)
        return await respond(request, lease, build, rid)

    async def produce(request: Request, lease: Lease, rid: str, obj: str,
                      stops: tuple[str, ...], include_usage: bool, one_call: bool,
                      put: Put) -> None:
        """SSE: per choice (`n`, one run after another, chunks indexed): a role chunk, one chunk
        per committed step (its trace in `specguard.step`), a final chunk with finish_reason and
        the run's trace; then the usage chunk if asked, then [DONE]. Runs in its own task; the
        slot and the request's place are freed as soon as the engine is done."""
        now, chat = int(time.time()), obj == "chat.completion.chunk"

        def chunk(index: int, delta: dict[str, Any], finish: str | None = None,
                  trace: dict[str, Any] | None = None) -> str:
            return convert.sse(
                convert.chat_chunk(rid, model_name, now, delta, finish, trace, include_usage,
                                   index) if chat else
                convert.completion_chunk(rid, model_name, now, delta.get("content", ""), finish,
                                         trace, include_usage, index))

        try:
            for index, stream in enumerate(lease.streams):
                async with slots.slot(request):
                    if chat:
                        put(chunk(index, {"role": "assistant", "content": ""}))
                    deltas = convert.StepDeltas(stops, one_call)
                    async for step in iterate_in_thread(partial(iter, stream), stream.close,
                                                        name="specguard-serve"):
                        put(chunk(index, deltas.delta(step), None,
                                  {"step": convert.step_trace(step)}))
                    result = stream.result
                    put(chunk(index, deltas.flush(result.text),
                              convert.openai_finish(result.finish_reason),
                              {"run": convert.run_trace(result, steps=False)}))
            if include_usage:
                put(convert.sse(convert.usage_chunk(rid, model_name, now, obj,
                                                    [s.result for s in lease.streams])))
        except ClientGone:
            return
        except Exception as err:  # noqa: BLE001 - headers are sent: report in-band, as vLLM does
            api = failure(err)
            put(convert.sse({"error": {**api.body["error"], "code": str(api.status)}}))
        finally:
            lease.release()
        put(convert.sse("[DONE]"))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        req: ChatCompletionRequest = await parse(request, ChatCompletionRequest)
        cfgs = config_for(req)
        try:
            messages = convert.engine_messages(req.messages)
        except InputError as err:
            raise APIError(400, str(err), param="messages") from None
        kwargs: dict[str, Any] = {"tools": req.tools, "tool_choice": req.tool_choice or "auto"}
        # the model is told the format (the engine verifies answers, it does not constrain
        # decoding), and the engine checks it where it can: an invalid draft answer goes to the target
        if req.response_format and (instruction := formats.format_instruction(
                req.response_format)):
            messages = formats.with_instruction(messages, instruction)
            if takes_format:
                kwargs["response_format"] = req.response_format
        lease = await open_stream(messages, cfgs, **kwargs)
        build = partial(with_logprobs if req.logprobs else convert.chat_response,
                        one_call=req.parallel_tool_calls is False)
        return await reply(request, req, lease, cfgs[0], "chatcmpl", "chat.completion.chunk",
                           build)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req: CompletionRequest = await parse(request, CompletionRequest)
        cfgs = config_for(req)
        lease = await open_stream(req.text(), cfgs)
        return await reply(request, req, lease, cfgs[0], "cmpl", "text_completion",
                           convert.completion_response)

    def with_logprobs(result: Any, rid: str, model: str, one_call: bool = False) -> dict[str, Any]:
        body = convert.chat_response(result, rid, model, one_call)
        body["choices"][0]["logprobs"] = {"content": result.answer_logprobs(engine.token_text),
                                          "refusal": None}
        return body

    card = {"id": model_name, "object": "model", "created": created, "owned_by": "specguard",
            "specguard": {"draft": redact(engine.draft.name), "target": redact(engine.target.name),
                          "context_window": engine.context_window}}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        authorise(request)
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(request: Request, model_id: str) -> dict[str, Any]:
        authorise(request)
        if model_id != model_name:
            raise APIError(404, f"the model asked for does not exist; this server serves "
                           f"{model_name!r}", "not_found_error", "model", "model_not_found")
        return card

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "running": slots.running,
                "queued": slots.admitted - slots.running, "max_concurrent": slots.max_concurrent,
                "max_queue": slots.max_queue}

    return app


