"""The tool-calling suites' bar plot: a real PNG of every group and method, latency over token-SD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_bench.common.plot import plot_groups

PAIR = {"draft": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "target": "/models/qwen-1.5b"}


def group(n_correct: int, latency: float) -> dict[str, float]:
    return {"n": 4, "n_correct": n_correct, "accuracy": n_correct / 4, "latency_mean_s": latency}


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[float]]]:
    """Bar heights drawn per method label, in drawing order (accuracy panel, then latency)."""
    import matplotlib.axes

    drawn: dict[str, list[list[float]]] = {}
    real_bar = matplotlib.axes.Axes.bar

    def spy(self: matplotlib.axes.Axes, x: list[float], height: list[float], *args: Any,
            **kwargs: Any) -> Any:
        drawn.setdefault(str(kwargs.get("label")), []).append(list(height))
        return real_bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", spy)
    return drawn


def test_plot_groups_draws_every_group_and_method(tmp_path: Path,
                                                  bars: dict[str, list[list[float]]]) -> None:
    import matplotlib.figure

    titles: list[str] = []
    real_suptitle = matplotlib.figure.Figure.suptitle

    def spy(self: matplotlib.figure.Figure, t: str, **kwargs: Any) -> Any:
        titles.append(t)
        return real_suptitle(self, t, **kwargs)

    groups = {"simple": {"target": group(4, 30.0), "token-sd": group(4, 20.0),
                         "balanced": group(3, 18.0)},
              "multiple": {"token-sd": group(2, 10.0), "balanced": group(2, 12.0)}}
    out = tmp_path / "plot.png"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, "suptitle", spy)
        plot_groups(groups, "BFCL, 3 tasks", PAIR, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert titles == ["BFCL, 3 tasks: Qwen2.5-Coder-0.5B-Instruct -> qwen-1.5b"]
    assert bars["target"] == [[100.0, 0], [1.5, 0]]  # absent from "multiple": an empty bar
    assert bars["balanced"] == [[75.0, 50.0], [pytest.approx(0.9), pytest.approx(1.2)]]
    assert bars["token-sd"][1] == [1.0, 1.0]


def test_plot_groups_without_token_sd_leaves_latency_empty(
        tmp_path: Path, bars: dict[str, list[list[float]]]) -> None:
    out = tmp_path / "plot.png"
    plot_groups({"all": {"target": group(1, 5.0)}}, "agents", PAIR, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert bars["target"] == [[25.0], [0]]
