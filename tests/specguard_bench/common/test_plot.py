"""The tool-calling suites' bar plot: a real PNG of every group and method, latency over token-SD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_bench.common.plot import plot_groups


def group(n_correct: int, latency: float) -> dict[str, float]:
    return {"n": 4, "n_correct": n_correct, "accuracy": n_correct / 4, "latency_mean_s": latency}


def test_plot_groups_draws_every_group_and_method(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.axes

    bars: list[tuple[list[float], list[float], str]] = []
    real_bar = matplotlib.axes.Axes.bar

    def spy(self: matplotlib.axes.Axes, x: list[float], height: list[float], *args: Any,
            **kwargs: Any) -> Any:
        bars.append((list(x), list(height), str(kwargs.get("label"))))
        return real_bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", spy)
    groups = {"simple": {"target": group(4, 30.0), "token-sd": group(4, 20.0),
                         "balanced": group(3, 18.0)},
              "multiple": {"token-sd": group(2, 10.0), "balanced": group(2, 12.0)}}
    out = tmp_path / "plot.png"
    plot_groups(groups, "title", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    by_label: dict[str, list[list[float]]] = {}
    for _, heights, label in bars:
        by_label.setdefault(label, []).append(heights)
    assert by_label["target"] == [[100.0, 0], [1.5, 0]]  # absent from "multiple": an empty bar
    assert by_label["balanced"] == [[75.0, 50.0], [pytest.approx(0.9), pytest.approx(1.2)]]
    assert by_label["token-sd"][1] == [1.0, 1.0]


def test_plot_groups_without_token_sd_leaves_latency_empty(tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    plot_groups({"all": {"target": group(1, 5.0)}}, "title", out)
    assert out.stat().st_size > 0
