"""`Generation`: an admitted request's run through the engine, answered as one JSON body or as SSE.

Admit (503 when `max_concurrent + max_queue` requests are already in), open the engine's streams
(`engine.stream` checks messages, tools and the context window eagerly, on a worker thread), wait
for a slot, then iterate the engine's steps on a worker thread of its own (`iterate_in_thread`);
the event loop only moves bytes. A streamed request's generation runs in a task of its own
(`streaming.Relay`): the slot is held while the engine works, not while a slow reader drains. A
client that leaves (mid-stream, or while queued) closes its `GenerationStream` and frees its slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from fastapi import Request
from openai.types import Completion
from openai.types.chat import ChatCompletion

from specguard.serve.api import chunks, convert, wire
from specguard.serve.api.protocol import ChatCompletionRequest, CompletionRequest, error_body
from specguard.serve.http.errors import client_safe, failure
from specguard.serve.http.intake import sent
from specguard.serve.http.metrics import Metrics, outcome_of
from specguard.serve.http.settings import ServeSettings
from specguard.serve.http.slots import APIError, ClientGone, Lease, Slots
from specguard.serve.running.events import Events
from specguard.serve.running.streaming import Buffers, EventStream, JSONBody, Put, Relay
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.text.logprobs import answer_logprobs
from specguard_core.types import GenerationResult

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine

# the response of a request's runs (prompts x n, prompt by prompt), its id and the model's name
Build = Callable[[list[GenerationResult], str, str], ChatCompletion | Completion]
OVERFLOW = chunks.sse({"error": {**error_body(
    "the stream was ended: its client read too slowly and the server's buffer of unread events "
    "(`specguard serve --max-stream-buffer-bytes`) is full; read the stream as it comes, or ask "
    "without stream", "server_overloaded")["error"], "code": "stream_buffer_full"}})
SHUTDOWN = chunks.sse(error_body(
    "the stream was ended: the server is shutting down; the answer so far is incomplete, ask "
    "again", "server_error", code="server_shutdown"))


@dataclass(frozen=True)
class Call:
    """One opened request: its endpoint ("chat" or "completions"), the client's request, its
    lease, when it arrived (`time.monotonic()`) and the response builder; for a stream, the
    alternatives per token when log-probabilities were asked for (None: not asked), the text each
    prompt's choices start with (`echo`), and the choices per prompt."""

    endpoint: str
    req: ChatCompletionRequest | CompletionRequest
    lease: Lease
    arrived: float
    build: Build
    logprobs: int | None = None
    echo: tuple[str, ...] = ()
    n: int = 1


class Generation:
    def __init__(self, engine: SpecGuardEngine, settings: ServeSettings, slots: Slots,
                 metrics: Metrics, model_name: str) -> None:
        self.engine, self.settings, self.slots, self.metrics = engine, settings, slots, metrics
        self.model_name = model_name
        self.buffers = Buffers(settings.max_stream_buffer_bytes)
        self.hidden = (engine.draft.name, engine.target.name)  # never told to a client

    def configs(self, req: ChatCompletionRequest | CompletionRequest,
                request: Request) -> list[SpecGuardConfig]:
        """One config per choice (`n`), seeds seed, seed+1, ..."""
        try:
            return convert.choice_configs(convert.request_config(
                self.engine.config, req, self.settings.limits), req.choices)
        except ValueError as err:
            raise APIError(400, client_safe(str(err), sent(request), self.hidden),
                           param="specguard" if req.specguard else None) from None

    def chat_build(self, logprobs: bool, echo: str = "") -> Build:
        """Chat's response builder: each run a choice, with the answer's log-probabilities when
        asked for, its content after `echo`."""
        def build(results: list[GenerationResult], rid: str, model: str) -> ChatCompletion:
            bodies = [convert.chat_response(
                r, rid, model, answer_logprobs(r, self.engine.token_text) if logprobs else None,
                echo) for r in results]
            merged = convert.merge_choices(bodies, results)
            assert isinstance(merged, ChatCompletion)
            return merged
        return build

    def failure(self, err: Exception, request: Request) -> APIError:
        return failure(err, sent(request), self.hidden)

    async def open(self, request: Request, inputs: list[Any], cfgs: list[SpecGuardConfig],
                   **kwargs: Any) -> Lease:
        """Admit (one place for all choices), then open the engine's streams, `cfgs` (one per
        choice) for each of `inputs` (a conversation, or the prompts of a completion), prompt
        by prompt: `engine.stream` validates eagerly (tokenises the prompt), on a worker thread,
        not on the event loop."""
        self.slots.admit()
        try:
            streams = await asyncio.to_thread(
                lambda: [self.engine.stream(inp, config=cfg, **kwargs)
                         for inp in inputs for cfg in cfgs])
            return Lease(self.slots, streams)
        except BaseException as err:
            self.slots.leave()
            if isinstance(err, Exception):
                raise self.failure(err, request) from None
            raise

    async def reply(self, request: Request, call: Call, cfg: SpecGuardConfig, prefix: str,
                    obj: str) -> Any:
        """The answer to an opened request: SSE events when it asked to stream, else one body."""
        rid = convert.new_id(prefix)
        if not call.req.stream:
            return await self.respond(request, call, rid)
        req = call.req
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        relay = Relay(self.buffers, OVERFLOW, SHUTDOWN)
        relay.produce = partial(self.produce, request, call, relay, rid, obj, cfg.stop,
                                include_usage)
        return EventStream(relay, call.lease, self.settings.sse_keepalive_s)

    async def run(self, request: Request, stream: GenerationStream) -> None:
        """Iterate to the end (non-streaming); stops early if the client leaves."""
        async with self.slots.slot(request):
            async for step in iterate_in_thread(lambda: stream, stream.close,
                                                name="specguard-serve"):
                self.metrics.step(step)
                if await request.is_disconnected():
                    raise ClientGone()

    async def respond(self, request: Request, call: Call, rid: str) -> Any:
        lease = call.lease
        try:
            for stream in lease.streams:  # the choices, one run after another
                await self.run(request, stream)
        except ClientGone:
            self.metrics.ended(call.endpoint, "aborted")
            return JSONBody(error_body("client disconnected", "invalid_request_error"), 499)
        except Exception as err:  # noqa: BLE001 - answered as OpenAI's error JSON
            raise self.failure(err, request) from None
        finally:
            lease.release()
        results = [stream.result for stream in lease.streams]
        self.metrics.finished(call.endpoint, results, time.monotonic() - call.arrived)
        return JSONBody(wire.dump(call.build(results, rid, self.model_name)))

    async def produce(self, request: Request, call: Call, relay: Relay, rid: str, obj: str,
                      stops: tuple[str, ...], include_usage: bool, put: Put) -> None:
        """SSE: per choice (`n`, one run after another, chunks indexed): a role chunk, one chunk
        per committed step (its trace in `specguard.step`), a final chunk with finish_reason and
        the run's trace; then the usage chunk if asked, then [DONE]. Runs in its own task; the
        slot and the request's place are freed as soon as the engine is done."""
        now, chat, lease = int(time.time()), obj == "chat.completion.chunk", call.lease
        try:
            for index, stream in enumerate(lease.streams):
                async with self.slots.slot(request):
                    echo = call.echo[index // call.n] if call.echo else ""
                    events = Events(self.engine, rid, self.model_name, now, include_usage,
                                    index, chat, call.logprobs, echo)
                    for event in events.opening(stream):
                        put(event)
                    deltas = events.deltas(stops)
                    async for step in iterate_in_thread(partial(iter, stream), stream.close,
                                                        name="specguard-serve"):
                        self.metrics.step(step)
                        put(events.chunk(deltas.delta(step), deltas.logprobs(), None,
                                         {"step": convert.step_trace(step)}))
                    result = stream.result
                    put(events.chunk(deltas.flush(result.text if chat else result.raw_text),
                                     deltas.logprobs(final=True),
                                     convert.chat_finish(result) if chat
                                     else convert.openai_finish(result.finish_reason),
                                     {"run": convert.run_trace(result, steps=False)}))
            results = [s.result for s in lease.streams]
            if include_usage:
                put(chunks.sse(chunks.usage_chunk(rid, self.model_name, now, obj, results,
                                                  call.n)))
            self.metrics.finished(call.endpoint, results, time.monotonic() - call.arrived)
        except ClientGone:
            self.metrics.ended(call.endpoint, "aborted")
            return
        except asyncio.CancelledError:  # the client left, or the stream's buffer overflowed
            self.metrics.ended(call.endpoint, "failed" if relay.ended else "aborted")
            raise
        except Exception as err:  # noqa: BLE001 - headers are sent: report in-band, as vLLM does
            api = self.failure(err, request)
            self.metrics.ended(call.endpoint, outcome_of(api.status))
            put(chunks.sse({"error": {**api.body["error"], "code": str(api.status)}}))
        finally:
            lease.release()
        put(chunks.sse("[DONE]"))
