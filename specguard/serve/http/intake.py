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
    served model's name."""
    req: Req = await parse_body(settings, request, model)
    for param, why in [*req.unsupported(), *req.problems(settings.limits)]:
        raise APIError(400, why, param=param, code="unsupported_parameter")
    check_model(req.model, model_name)
    return req


def check_model(name: str | None, model_name: str) -> None:
    """A 404 unless `name` is the served model's (None: not named, as /tokenize allows)."""
    if name is not None and name != model_name:
        raise APIError(404, f"the model named in the request does not exist; this server "
                       f"serves {model_name!r} (GET /v1/models)", "not_found_error", "model",
                       "model_not_found")


async def parse_body(settings: ServeSettings, request: Request, model: type[Body]) -> Body:
    """The authorised request's body, decoded and validated as `model`."""
    authorise(settings, request)
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
    request.state.sent = client_strings(body)
    try:
        return model.model_validate(body)
    except ValidationError as err:
        message, param = validation_message(err)
        raise APIError(400, message, param=param) from None
