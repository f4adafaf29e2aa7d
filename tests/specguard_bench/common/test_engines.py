"""`specguard-remote`: the balanced preset on a second engine whose target is on a (fake) vLLM
server, beside the in-process methods of the same run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard_bench.cli.parsers import main
from specguard_bench.common.engines import Engines, PairSettings, ServedTarget
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import RESULTS, RUN, load_rows
from specguard_bench.concurrency.rounds import load_rounds
from specguard_bench.concurrency.run import ROUNDS as CONC_ROUNDS
from specguard_bench.concurrency.run import run_concurrency
from specguard_bench.reasoning.harness import run_bench
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.remote.target import RemoteTarget
from tests.specguard.serve.serve_helpers import live_server
from tests.specguard_bench.bench_helpers import local_engine, scripted_pair, target_reply
from tests.specguard_core.remote.vllm_helpers import FakeVLLM


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The scripted pair, its target also behind a fake vLLM server."""
    pair = scripted_pair(tmp_path_factory.mktemp("tok"))
    fake = FakeVLLM(pair["target"], pair["tok"], name="scripted-target", max_model_len=4096)
    with live_server(fake.app()) as base:
        yield {**pair, "fake": fake, "url": f"{base}/v1"}


def test_remote_method_runs_the_balanced_preset_through_the_server(
        scripted: dict[str, Any], tmp_path: Path) -> None:
    url, fake = scripted["url"], scripted["fake"]
    remote = SpecGuardEngine(scripted["draft"], scripted["tok"],
                             RemoteTarget.connect(url, "scripted-target", scripted["tok"]))
    settings = BenchSettings(out_dir=tmp_path, n=2, max_new_tokens=96, progress=False,
                             methods=("specguard-balanced", "specguard-remote"),
                             served=ServedTarget(url=url, model="scripted-target"))
    before = len(fake.requests)
    summary = run_bench(settings, engine=local_engine(scripted), remote_engine=remote)
    rows = {(r.uid, r.method): r for r in load_rows(tmp_path / RESULTS)}
    assert len(rows) == 4
    for i in range(2):
        local, served = rows[f"gsm8k/{i}", "specguard-balanced"], rows[f"gsm8k/{i}", "specguard-remote"]
        # the draft's wrong step was caught and rewritten by the served target, as in-process
        assert served.text == local.text and "maybe" not in served.text
        assert served.target_tokens == local.target_tokens and served.target_tokens
        assert [s["path"] for s in served.step_trace or []] == [
            s["path"] for s in local.step_trace or []]
    assert rows["gsm8k/0", "specguard-remote"].correct  # the target's script solves #0
    assert len(fake.requests) > before  # every target pass of the remote method went there
    assert summary["configs"]["specguard-remote"] == summary["configs"]["specguard-balanced"]
    assert summary["environment"]["target_dtype"] == "torch.float32"  # the in-process pair's
    assert f"(specguard-remote: `scripted-target` at {url})" in (tmp_path / "results.md").read_text()
    assert json.loads((tmp_path / RUN).read_text())["served_target"] == {
        "url": url, "model": "scripted-target", "tokenizer": None, "variant": ["balanced", {}]}

    # concurrent clients of the remote engine get their serial answers too
    conc = BenchSettings(out_dir=tmp_path / "conc", n=2, max_new_tokens=96, progress=False,
                         methods=("specguard-remote",), served=settings.served)
    report = run_concurrency(conc, (2,), remote_engine=remote)
    assert [s["same_text_as_1"] for s in report["levels"]] == [None, 2]
    texts = [q.row.text for q in load_rounds(tmp_path / "conc" / CONC_ROUNDS)[1].requests]
    assert texts[0].startswith("Read the question.") and texts[0].endswith(
        "\\boxed{18}.")  # the target's script, served
    assert "served by scripted-target@" in report["environment"]["target_dtype"]


def test_cli_target_url_adds_specguard_remote(bench_pair_dirs: tuple[Path, Path],
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    draft, target = bench_pair_dirs
    fake = FakeVLLM(AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32),
                    AutoTokenizer.from_pretrained(target), name="served", max_model_len=2048)
    common = ["--draft", str(draft), "--target", str(target), "--device", "cpu", "--dtype",
              "float32", "--max-new-tokens", "8", "--no-progress", "--n", "1"]
    out = tmp_path / "run"
    with live_server(fake.app()) as base:
        url = f"{base}/v1"
        argv = ["bench", "--methods", "specguard-balanced", "--target-url", url,
                "--target-model", "served", "--out", str(out), *common]
        assert main(argv) == 0
        rows = {r.method: r for r in load_rows(out / RESULTS)}
        assert set(rows) == {"specguard-balanced", "specguard-remote"}
        assert rows["specguard-remote"].text == rows["specguard-balanced"].text  # greedy pair
        assert rows["specguard-remote"].target_forwards and fake.requests
        run = json.loads((out / RUN).read_text())
        assert (run["served_target"]["url"], run["served_target"]["model"]) == (url, "served")
        served = json.loads((out / "summary.json").read_text())["settings"]["methods"]
        assert served == ["specguard-balanced", "specguard-remote"]
        # another served model is another run: refused before anything loads
        capsys.readouterr()
        assert main([*argv, "--target-model", "other"]) == 2  # the last one counts
        assert "served_target differ" in capsys.readouterr().err
        assert main(["bench", "--concurrency", "1", "--methods", "specguard-remote",
                     "--target-url", url, "--target-model", "served", "--out",
                     str(tmp_path / "conc"), *common]) == 0
    # a served-target flag without --target-url, or the method alone, says what is missing
    assert main(["bench", "--target-model", "served", "--out", str(tmp_path / "x"), *common]) == 2
    assert "--target-model needs --target-url" in capsys.readouterr().err
    assert main(["bench", "--methods", "specguard-remote", "--out", str(tmp_path / "x"),
                 *common]) == 2
    assert "give its address with --target-url" in capsys.readouterr().err


def test_engines_load_each_engine_when_first_needed(scripted: dict[str, Any]) -> None:
    local = local_engine(scripted)
    engines = Engines(PairSettings(), None, local=local)
    assert engines.for_method("specguard-fast") is local and engines.any() is local
    with pytest.raises(ValueError, match="--target-url"):
        engines.for_method("specguard-remote")
    served = ServedTarget(url="http://x/v1", model="m", api_key="secret", timeout_s=5.0)
    assert "secret" not in json.dumps(served.fingerprint())
    assert served.options() == {"target_model": "m", "target_timeout": 5.0,
                                "target_api_key": "secret"}
    assert target_reply("Janet x").endswith("\\boxed{18}.")
