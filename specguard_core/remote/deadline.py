"""A wall-clock deadline for a whole HTTP call (`httpx` over `httpcore`).

httpx's timeouts bound each socket operation: a server that sends its answer a few bytes at a
time resets the read timeout with every byte and so holds one call open for as long as it likes.
`DeadlineTransport` runs every socket operation (connect, TLS, write, each read of the headers
and of the body) through a network backend that shortens the operation's timeout to what is left
of the call's deadline and fails it once the deadline has passed. The deadline is set per call
and per thread (`within(seconds)`), so concurrent calls from several threads each keep their own.

Proxies: an `http(s)_proxy` from the environment that applies to the server's host is used as
httpx would use it (`no_proxy` honoured); SOCKS proxies are not supported here.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

# .at: the monotonic deadline of this thread's current call; .cap: the deadline of the request
# this thread works for (no call of it may end later)
_CALL = threading.local()


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Every socket operation of this thread's HTTP calls through a `DeadlineTransport` must end
    within `seconds` from now (wall clock), and before the request's deadline (`capped`), or it
    raises a timeout."""
    before = getattr(_CALL, "at", None)
    at = time.monotonic() + seconds
    cap = getattr(_CALL, "cap", None)
    _CALL.at = at if cap is None else min(at, cap)
    try:
        yield
    finally:
        _CALL.at = before


@contextmanager
def capped(at: float | None) -> Iterator[None]:
    """This thread's calls (`within`) end by `at` (a `time.monotonic()` deadline, None: no cap)
    at the latest: the deadline of the request they serve, which may come before a call's own."""
    before = getattr(_CALL, "cap", None)
    _CALL.cap = at
    try:
        yield
    finally:
        _CALL.cap = before


def cap_passed() -> bool:
    """Whether this thread's request deadline (`capped`) has passed: a call that timed out then
    ran out of the request's time rather than its own."""
    cap = getattr(_CALL, "cap", None)
    return cap is not None and time.monotonic() >= cap


def _left(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    """`timeout` shortened to what is left of the current call's deadline; raises `expired`
    when nothing is left."""
    at = getattr(_CALL, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                             _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                               local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(
            path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _env_proxy(url: str) -> httpx.URL | None:
    """The environment's HTTP(S) proxy for `url`, None when there is none or `no_proxy` skips it."""
    target = httpx.URL(url)
    proxy = urllib.request.getproxies().get(target.scheme)
    if not proxy or urllib.request.proxy_bypass(target.host):
        return None
    found = httpx.URL(proxy if "://" in proxy else f"http://{proxy}")
    return found if found.scheme in ("http", "https") else None


def _translated(err: httpcore.TimeoutException | Exception, request: httpx.Request) -> Exception:
    """httpcore's error as the httpx error of the same name (httpx's own transport does so)."""
    kind = getattr(httpx, type(err).__name__, httpx.TransportError)
    if not (isinstance(kind, type) and issubclass(kind, httpx.TransportError)):
        kind = httpx.TransportError
    return kind(str(err) or type(err).__name__, request=request)


class _Body(httpx.SyncByteStream):
    def __init__(self, inner: Iterable[bytes], request: httpx.Request,
                 close: Any) -> None:
        self._inner, self._request, self._close = inner, request, close

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._inner
        except httpcore.TimeoutException as err:
            raise _translated(err, self._request) from None
        except (httpcore.NetworkError, httpcore.ProtocolError) as err:
            raise _translated(err, self._request) from None

    def close(self) -> None:
        self._close()


class DeadlineTransport(httpx.BaseTransport):
    """httpx's default transport for one server at `url`, its socket operations bounded by the
    calling thread's deadline (`within`)."""

    def __init__(self, url: str) -> None:
        ssl_context = httpx.create_ssl_context()
        proxy = _env_proxy(url)
        self._pool: httpcore.ConnectionPool | httpcore.HTTPProxy
        if proxy is None:
            self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=_Backend())
        else:
            auth = (proxy.username, proxy.password) if proxy.username else None
            self._pool = httpcore.HTTPProxy(
                proxy_url=str(proxy.copy_with(username=None, password=None)), proxy_auth=auth,
                ssl_context=ssl_context, network_backend=_Backend())

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                             port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        try:
            resp = self._pool.handle_request(req)
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError,
                httpcore.UnsupportedProtocol, httpcore.ProxyError) as err:
            raise _translated(err, request) from None
        assert isinstance(resp.stream, Iterable)
        return httpx.Response(status_code=resp.status, headers=resp.headers,
                              stream=_Body(resp.stream, request, resp.close),
                              extensions=resp.extensions)

    def close(self) -> None:
        self._pool.close()
