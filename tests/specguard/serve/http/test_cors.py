"""Browsers, through a live server: an allowed origin's preflight is answered with CORS headers and
its requests (errors included) carry them; any other origin is still refused; '*' needs an API
key and cannot take credentials."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import ANSWER, error_of, live_server, reply  # noqa: E402

UI, EVIL = "http://localhost:3000", "https://evil.example"
BODY = {"model": "specguard-scripted", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(reply)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    with live_server(create_app(engine, ServeSettings(allowed_origins=(UI + "/",)))) as url:
        yield url


def preflight(url: str, origin: str, headers: str = "content-type") -> httpx.Response:
    return httpx.options(f"{url}/v1/chat/completions", timeout=10, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": headers})


def test_an_allowed_origin_gets_cors_headers(base: str) -> None:
    r = preflight(base, UI, "authorization, content-type")
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == UI
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in r.headers
    ok = httpx.post(f"{base}/v1/chat/completions", json=BODY, headers={"Origin": UI}, timeout=30)
    assert ok.json()["choices"][0]["message"]["content"] == ANSWER
    assert ok.headers["access-control-allow-origin"] == UI
    # errors a page must be able to read carry the headers too
    bad = httpx.post(f"{base}/v1/chat/completions", content=b"{}", timeout=10,
                     headers={"Origin": UI, "Content-Type": "text/plain"})
    assert error_of(bad, 415) and bad.headers["access-control-allow-origin"] == UI
    missing = httpx.get(f"{base}/v1/responses", headers={"Origin": UI}, timeout=10)
    assert error_of(missing, 404) and missing.headers["access-control-allow-origin"] == UI


def test_another_origin_is_still_refused(base: str) -> None:
    r = preflight(base, EVIL)
    err = error_of(r, 403)
    assert err["code"] == "origin_not_allowed" and "--allowed-origins" in err["message"]
    assert "access-control-allow-origin" not in r.headers
    post = httpx.post(f"{base}/v1/chat/completions", json=BODY, headers={"Origin": EVIL},
                      timeout=10)
    assert error_of(post, 403) and "access-control-allow-origin" not in post.headers


def test_headers_and_methods_not_allowed_fail_the_preflight(base: str) -> None:
    assert preflight(base, UI, "x-custom").status_code == 400
    r = httpx.options(f"{base}/v1/chat/completions", timeout=10, headers={
        "Origin": UI, "Access-Control-Request-Method": "DELETE"})
    assert r.status_code == 400


def test_any_origin_needs_a_key(engine: SpecGuardEngine) -> None:
    with pytest.raises(ValueError, match="API key"):
        ServeSettings(allowed_origins=("*",))
    with pytest.raises(ValueError, match="credentials"):
        ServeSettings(api_key="k", allowed_origins=("*",), allow_credentials=True)
    with live_server(create_app(engine, ServeSettings(api_key="k", allowed_origins=("*",)))) as url:
        r = preflight(url, EVIL, "authorization,content-type")
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
        # a page without the key gets nothing but the 401
        anon = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers={"Origin": EVIL},
                          timeout=10)
        assert error_of(anon, 401)["code"] == "invalid_api_key"
        keyed = httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=30,
                           headers={"Origin": EVIL, "Authorization": "Bearer k"})
        assert keyed.status_code == 200 and keyed.headers["access-control-allow-origin"] == "*"


def test_credentials_when_asked(engine: SpecGuardEngine) -> None:
    settings = ServeSettings(allowed_origins=(UI,), allow_credentials=True,
                             allowed_methods=("post",), allowed_headers=("X-Trace",))
    with live_server(create_app(engine, settings)) as url:
        r = preflight(url, UI, "x-trace")
        assert r.status_code == 200 and r.headers["access-control-allow-credentials"] == "true"
        assert r.headers["access-control-allow-methods"] == "POST"
