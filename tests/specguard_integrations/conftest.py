"""Each test loads its pairs afresh: the process-wide registry of loaded pairs is the test's own,
so an engine a fake loader returned in one test is never handed to the next."""

from __future__ import annotations

import pytest

from specguard_integrations import engines


@pytest.fixture(autouse=True)
def own_loaded_pairs(monkeypatch: pytest.MonkeyPatch) -> engines.LoadedPairs:
    pairs = engines.LoadedPairs()
    monkeypatch.setattr(engines, "PAIRS", pairs)
    return pairs
