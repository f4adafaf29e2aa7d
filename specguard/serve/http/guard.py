"""What every HTTP request must pass before any routing or parsing (pure ASGI middlewares,
answering in OpenAI's error JSON). `create_app` stacks them: `Guard`, then Starlette's
`CORSMiddleware` (for the allowed origins), then `BodyGuard`, so the body's errors carry CORS
headers a page can read.

- `Guard`: the Host allow-list (400): without an API key only loopback names are answered, so a
  web page cannot reach a local server through a DNS name it rebinds to 127.0.0.1. A foreign
  `Origin` (403), a CORS preflight included: a browser page of an origin neither the server's own
  nor allowed is refused even where it could send a request without a preflight.
- `BodyGuard`: POST bodies `application/json` only (415; a page's form or `text/plain` post is
  not one), and at most `max_body_bytes` (413), checked on Content-Length and again while
  reading, before the body is parsed. The body read here is handed on to the app.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from specguard.serve.api.protocol import error_body


def host_name(value: str) -> str:
    """The host of a Host header (or an origin's netloc): lower-case, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else ""
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """`allowed_hosts`: the Host names answered (None: any); `allowed_origins`: origins
    (`scheme://host[:port]`) allowed besides the server's own ("*": any)."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str] | None,
                 allowed_origins: frozenset[str]) -> None:
        self.app, self.allowed_hosts = app, allowed_hosts
        self.allowed_origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if self.allowed_hosts is not None and host_name(host) not in self.allowed_hosts:
            await _refuse(scope, receive, send, 400, "this server answers only requests to its "
                          "allowed host names (without --api-key: 127.0.0.1, localhost, ::1); "
                          "connect to one of those, or start the server with --allowed-host NAME",
                          "host_not_allowed")
            return
        origin = headers.get("origin")
        if origin is not None and not self._same_or_allowed(origin, host):
            await _refuse(scope, receive, send, 403, "requests from a web page of another origin "
                          "are refused (start the server with --allowed-origins ORIGIN,... to "
                          "allow some)", "origin_not_allowed")
            return
        await self.app(scope, receive, send)

    def _same_or_allowed(self, origin: str, host: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        return urlsplit(origin).netloc == host.strip().lower() or origin in self.allowed_origins \
            or "*" in self.allowed_origins


class BodyGuard:
    """POST bodies: JSON only, at most `max_body_bytes`."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            await _refuse(scope, receive, send, 415, "send the request body as JSON, with "
                          "'Content-Type: application/json'", "unsupported_media_type")
            return
        length = headers.get("content-length")
        if length is not None and (not length.strip().isdigit() or
                                   int(length) > self.max_body_bytes):
            await self._too_large(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body arrived: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _refuse(scope, receive, send, 413, f"the request body is over {self.max_body_bytes} "
                      "bytes, this server's limit (`specguard serve --max-body-bytes`)",
                      "request_too_large")


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app the body read already, then the client's own messages
    (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()
    return replay


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str,
                  code: str) -> None:
    await JSONResponse(error_body(message, "invalid_request_error", None, code),
                       status_code=status)(scope, receive, send)
