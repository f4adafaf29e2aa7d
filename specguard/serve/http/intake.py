"""A request's way in: the API key, then the body decoded and validated (`api/protocol.py`,
within the operator's `Limits`) into a request model; every refusal an `APIError` (OpenAI's error
JSON).

The strings the client sent are kept on `request.state.sent` (`errors.client_strings`), so an
engine error about this request is worded without them (`errors.client_safe`).
"""

from __future__ import annotations

import json
import secrets
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from specguard.serve.api.protocol import ChatCompletionRequest, CompletionRequest
from specguard.serve.api.untrusted import body_problem
from specguard.serve.http.errors import client_strings, validation_message
from specguard.serve.http.settings import ServeSettings
from specguard.serve.http.slots import APIError

Req = TypeVar("Req", ChatCompletionRequest, CompletionRequest)
Body = TypeVar("Body", bound=BaseModel)


def authorise(settings: ServeSettings, request: Request) -> None:
    """Nothing without an API key; else 'Authorization: Bearer <key>' or a 401."""
    if settings.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(key.strip().encode(),
                                                                settings.api_key.encode()):
        raise APIError(401, "invalid or missing API key; send 'Authorization: Bearer <key>' "
                       "with the key given to `specguard serve --api-key`",
                       "authentication_error", code="invalid_api_key")


def sent(request: Request) -> frozenset[str]:
    """The strings the client sent in its body (empty before `parse`)."""
    return getattr(request.state, "sent", frozenset())


async def parse(settings: ServeSettings, model_name: str, request: Request,
                model: type[Req]) -> Req:
    """The authorised request's body as `model`, checked against the operator's limits and the
    served model's name. The body is read on the event loop and decoded and validated on a
    worker thread, so a large body never holds up other requests (`/health` included)."""
    authorise(settings, request)
    raw = await request.body()
    req, request.state.sent = await run_in_threadpool(_checked, settings, model_name, raw, model)
    return req


def _checked(settings: ServeSettings, model_name: str, raw: bytes,
             model: type[Req]) -> tuple[Req, frozenset[str]]:
    """`raw` as `model` (`_validated`), within the operator's limits and for the served model."""
    checked: tuple[Req, frozenset[str]] = _validated(raw, model)
    req: Req = checked[0]
    for param, why in [*req.unsupported(), *req.problems(settings.limits)]:
        raise APIError(400, why, param=param, code="unsupported_parameter")
    check_model(req.model, model_name)
    return checked


def check_model(name: str | None, model_name: str) -> None:
    """A 404 unless `name` is the served model's (None: not named, as /tokenize allows)."""
    if name is not None and name != model_name:
        raise APIError(404, f"the model named in the request does not exist; this server "
                       f"serves {model_name!r} (GET /v1/models)", "not_found_error", "model",
                       "model_not_found")


async def parse_body(settings: ServeSettings, request: Request, model: type[Body]) -> Body:
    """The authorised request's body, decoded and validated as `model` on a worker thread."""
    authorise(settings, request)
    raw = await request.body()
    body, request.state.sent = await run_in_threadpool(_validated, raw, model)
    return body


def _validated(raw: bytes, model: type[Body]) -> tuple[Body, frozenset[str]]:
    """`raw` as `model` (an APIError for anything wrong with it), and the strings it holds."""
    try:
        body = json.loads(raw)
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
    strings = client_strings(body)
    try:
        return model.model_validate(body), strings
    except ValidationError as err:
        message, param = validation_message(err)
        raise APIError(400, message, param=param) from None
