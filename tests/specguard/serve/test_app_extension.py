"""The `specguard` request extension at the server's trust boundary, through a live server: a
client sets sampling and algorithm knobs within the operator's limits, never a path, a model name
or a loader option; a verifier only by the name of a card in the operator's folder; a knob given
both as an OpenAI field and in the extension has one value."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import record_stream_configs

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.api.extension import Limits  # noqa: E402
from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.engine.verify.cards import Fingerprint, VerifierCard, fingerprint  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    error_of,
    health,
    live_server,
    post_chat,
    reply,
)


def write_card(engine: SpecGuardEngine, path: Path, bias: float) -> None:
    """A card for the scripted draft that reads confidence alone and scores every step
    sigmoid(bias): +20 keeps every draft step, -20 sends every step to the target."""
    fp = Fingerprint.model_validate(fingerprint(engine.draft.model, engine.draft.tokenizer))
    VerifierCard(model=fp, features=["confidence"], mean=[0.0], scale=[1.0], weights=[0.0],
                 bias=bias).save(path)


@pytest.fixture(scope="module")
def cards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cards")


@pytest.fixture(scope="module")
def engine(cards: Path) -> SpecGuardEngine:
    engine = scripted_engine(reply)
    write_card(engine, cards / "keep.json", 20.0)
    write_card(engine, cards / "drop.json", -20.0)
    return engine


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine, cards: Path) -> Iterator[str]:
    settings = ServeSettings(limits=Limits(max_k=4, max_tokens=300, verifier_dir=cards))
    with live_server(create_app(engine, settings)) as url:
        yield url


def test_a_verifier_path_is_never_read(base: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "hunter2-do-not-show"}')
    for name in (str(secret), "/dev/zero", "../secret", "keep/../../secret"):
        r = post_chat(base, specguard={"verifier": name})
        err = error_of(r, 400)
        assert err["param"] == "specguard" and "--verifier-dir" in err["message"]
        assert "hunter2" not in r.text and str(tmp_path) not in r.text and name not in r.text
        assert "drop" in err["message"] and "keep" in err["message"]  # the names it may send
    assert health(base)["queued"] == 0 and health(base)["running"] == 0


def test_a_verifier_by_the_name_of_an_operator_card(base: str) -> None:
    kept = post_chat(base, specguard={"verifier": "keep", "tau": 0.5}).json()
    assert kept["choices"][0]["message"]["content"] == ANSWER
    assert all(s["source"] == "draft" and s["accepted"] for s in kept["specguard"]["steps"])
    dropped = post_chat(base, specguard={"verifier": "drop.json", "tau": 0.5}).json()
    assert all(s["source"] == "target" for s in dropped["specguard"]["steps"])
    paper = post_chat(base, specguard={"verifier": "paper"})
    assert paper.status_code == 200, paper.text


@pytest.mark.parametrize(("knobs", "needle"), [
    ({"selector": "sentence-transformer", "sentence_transformer": "/models/st"}, "operator"),
    ({"experimental": {"sentence_transformer": "org/some-model"}}, "operator"),
    ({"sentence_transformer": "org/some-model"}, "operator"),
    ({"heterogeneous": True}, "engine setting"),
    ({"max_batch_rows": 1000}, "engine setting"),
    ({"trust_remote_code": True}, "not a SpecGuard knob"),
    ({"k": 64}, "--max-k"),
    ({"fallback_k": 64, "fallback": "sample"}, "--max-k"),
    ({"max_new_tokens": 100_000}, "--max-tokens-cap"),
    ({"max_step_tokens": 100_000}, "--max-tokens-cap"),
    ({"stop": ["x"] * 100}, "stop"),
    ({"step_delimiters": ["y" * 1000]}, "step_delimiters"),
])
def test_paths_models_loader_options_and_sizes_are_refused(base: str, knobs: dict[str, Any],
                                                           needle: str) -> None:
    r = post_chat(base, specguard=knobs)
    err = error_of(r, 400)
    assert needle in err["message"] and err["param"] == "specguard"
    assert "/models/st" not in r.text and "org/some-model" not in r.text
    assert health(base)["queued"] == 0


def test_max_tokens_is_capped(base: str) -> None:
    err = error_of(post_chat(base, max_tokens=301), 400)
    assert "--max-tokens-cap" in err["message"] and err["param"] == "max_tokens"
    assert error_of(post_chat(base, max_completion_tokens=10**6), 400)["param"] == "max_tokens"
    assert post_chat(base, max_tokens=300).status_code == 200


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[Any]]]:
    engine = scripted_engine(reply)
    seen = record_stream_configs(engine, monkeypatch)
    with live_server(create_app(engine)) as url:
        yield url, seen


def test_a_knob_in_both_places_has_one_value(spied: tuple[str, list[Any]]) -> None:
    base, seen = spied
    for knobs in ({"temperature": 0.5}, {"max_new_tokens": 7}, {"stop": ["multiply"]},
                  {"seed": 3}):
        r = post_chat(base, specguard=knobs)  # the extension alone: no longer a 500
        assert r.status_code == 200, r.text
    assert (seen[0].temperature, seen[1].max_new_tokens, seen[2].stop, seen[3].seed) == \
        (0.5, 7, ("multiply",), 3)
    same = post_chat(base, temperature=0.5, max_tokens=7, stop="multiply",
                     specguard={"temperature": 0.5, "max_new_tokens": 7, "stop": "multiply"})
    assert same.status_code == 200 and seen[-1].max_new_tokens == 7
    for top, knobs in (({"temperature": 0}, {"temperature": 0.5}),
                       ({"max_tokens": 8}, {"max_new_tokens": 7}),
                       ({"stop": ["a"]}, {"stop": ["b"]})):
        err = error_of(post_chat(base, **top, specguard=knobs), 400)
        assert "set twice" in err["message"] and next(iter(top)) in err["message"]
    assert len(seen) == 5  # refused before the engine was asked


def test_algorithm_knobs_still_reach_the_engine(spied: tuple[str, list[Any]]) -> None:
    base, seen = spied
    r = post_chat(base, specguard={"k": 2, "temperature": 0.7, "beta": 0.5, "route": "check",
                                   "check_tokens": 4, "typical_eps": 0.05,
                                   "experimental": {"grounding_layers": 2}})
    assert r.status_code == 200, r.text
    cfg = seen[-1]
    assert (cfg.k, cfg.beta, cfg.route, cfg.check_tokens) == (2, 0.5, "check", 4)
    assert (cfg.experimental.grounding_layers, cfg.typical_eps) == (2, 0.05)
    err = error_of(post_chat(base, specguard={"tau_accept": 0.2, "tau_reject": 0.9}), 400)
    assert "tau_reject" in err["message"] and "input_value" not in json.dumps(err)
