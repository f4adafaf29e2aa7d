"""What every request must pass before parsing, through a live server: the Host allow-list
(loopback names only without an API key), a foreign Origin, the media type of POST bodies and
their size (Content-Length, and while reading a chunked body)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.api.extension import Limits  # noqa: E402
from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import ANSWER, error_of, live_server, reply  # noqa: E402

BODY = {"model": "specguard-scripted", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(reply)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    with live_server(create_app(engine, ServeSettings(limits=Limits(max_body_bytes=4000)))) as url:
        yield url


def post(url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("json", BODY)
    return httpx.post(f"{url}/v1/chat/completions", timeout=30, **kwargs)


def test_without_a_key_only_loopback_host_names_are_answered(base: str) -> None:
    port = base.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.2", "localhost.evil.example"):
        err = error_of(post(base, headers={"Host": host}), 400)
        assert err["code"] == "host_not_allowed" and "--allowed-host" in err["message"]
        assert error_of(httpx.get(f"{base}/health", headers={"Host": host}, timeout=5), 400)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert post(base, headers={"Host": host}).json()["choices"][0]["message"]["content"] == \
            ANSWER


def test_with_a_key_any_host_or_the_allowed_ones(engine: SpecGuardEngine) -> None:
    auth = {"Authorization": "Bearer k"}
    with live_server(create_app(engine, ServeSettings(api_key="k"))) as url:
        assert post(url, headers={**auth, "Host": "gpu-box.lan"}).status_code == 200
    settings = ServeSettings(api_key="k", allowed_hosts=("api.internal",))
    with live_server(create_app(engine, settings)) as url:
        assert post(url, headers={**auth, "Host": "api.internal:443"}).status_code == 200
        assert error_of(post(url, headers={**auth, "Host": "gpu-box.lan"}), 400)


@pytest.mark.parametrize("key", ["", "   ", "\t\n"])
def test_an_empty_or_blank_api_key_is_refused(key: str) -> None:
    """Such a key would let any Host in (a page rebinding its DNS name to this server too) and
    any client that sends it: refused when the server is configured."""
    with pytest.raises(ValueError, match="empty or blank"):
        ServeSettings(api_key=key)


def test_a_foreign_origin_is_refused(base: str, engine: SpecGuardEngine) -> None:
    port = base.rsplit(":", 1)[1]
    for origin in ("http://evil.example", "null", f"http://localhost:{int(port) + 1}"):
        err = error_of(post(base, headers={"Origin": origin}), 403)
        assert err["code"] == "origin_not_allowed"
    assert post(base, headers={"Origin": f"http://127.0.0.1:{port}"}).status_code == 200
    settings = ServeSettings(allowed_origins=("http://localhost:3000",))
    with live_server(create_app(engine, settings)) as url:
        assert post(url, headers={"Origin": "http://localhost:3000"}).status_code == 200


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None])
def test_post_bodies_must_be_json(base: str, media: str | None) -> None:
    headers = {"Content-Type": media} if media else {}
    r = httpx.post(f"{base}/v1/chat/completions", content=json.dumps(BODY).encode(),
                   headers=headers, timeout=30)
    assert error_of(r, 415)["code"] == "unsupported_media_type"
    ok = httpx.post(f"{base}/v1/chat/completions", content=json.dumps(BODY).encode(),
                    headers={"Content-Type": "application/json; charset=utf-8"}, timeout=30)
    assert ok.status_code == 200


def test_body_size_is_bounded_before_parsing(base: str) -> None:
    big = {**BODY, "user": "x" * 5000}
    err = error_of(post(base, json=big), 413)
    assert err["code"] == "request_too_large" and "--max-body-bytes" in err["message"]

    def chunks(total: int) -> Iterator[bytes]:  # no Content-Length: sent chunked
        data = json.dumps({**BODY, "user": "x" * total}).encode()
        yield from (data[i:i + 500] for i in range(0, len(data), 500))

    headers = {"Content-Type": "application/json"}
    r = httpx.post(f"{base}/v1/chat/completions", content=chunks(5000), headers=headers,
                   timeout=30)
    assert error_of(r, 413)["code"] == "request_too_large"
    small = httpx.post(f"{base}/v1/chat/completions", content=chunks(100), headers=headers,
                       timeout=30)
    assert small.json()["choices"][0]["message"]["content"] == ANSWER
