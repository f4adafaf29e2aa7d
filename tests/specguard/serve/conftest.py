"""What most server tests share: a scripted engine writing `reply`, and a live server over it
(module-scoped; a module that needs another engine or settings defines its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import scripted_engine
from tests.specguard.serve.serve_helpers import live_server, reply


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(reply)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from specguard.serve.app import create_app

    with live_server(create_app(engine)) as url:
        yield url
