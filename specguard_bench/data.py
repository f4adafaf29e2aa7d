"""Benchmark problems (GSM8K, MATH-500) shipped with the package, and the paper's prompt.

The files live in `specguard_bench/data/` (see its README for source and licence). Problems keep
their file order, so `offset`/`n` name the same slice everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DATASETS: dict[str, str] = {"gsm8k": "gsm8k.jsonl", "math500": "math500.jsonl"}


@dataclass(frozen=True)
class Problem:
    """One benchmark problem. `uid` (`<dataset>/<row index>`) is stable across runs."""

    uid: str
    dataset: str
    index: int
    question: str
    gold: str


def gsm8k_gold(answer: str) -> str:
    """The final number of a GSM8K worked answer (the text after `####`), thousands separators
    removed: `"... #### 1,600"` -> `"1600"`."""
    if "####" not in answer:
        raise ValueError("a GSM8K answer must end with '#### <number>'")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _problem(dataset: str, index: int, row: dict[str, Any]) -> Problem:
    if dataset == "gsm8k":
        return Problem(f"gsm8k/{index}", dataset, index, row["question"], gsm8k_gold(row["answer"]))
    return Problem(f"math500/{index}", dataset, index, row["problem"], str(row["answer"]))


def read_rows(dataset: str) -> list[dict[str, Any]]:
    """All rows of a shipped dataset file, in file order."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(DATASETS)}")
    text = (
        resources.files("specguard_bench").joinpath(f"data/{DATASETS[dataset]}").read_text("utf-8")
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_problems(dataset: str, n: int | None = None, offset: int = 0) -> list[Problem]:
    """Problems `offset .. offset+n-1` of `dataset` (all from `offset` when n is None).

    Raises ValueError for an unknown dataset, a negative offset/n, or an empty slice."""
    if offset < 0 or (n is not None and n < 0):
        raise ValueError("offset and n must be >= 0")
    rows = read_rows(dataset)
    end = len(rows) if n is None else min(len(rows), offset + n)
    problems = [_problem(dataset, i, rows[i]) for i in range(offset, end)]
    if not problems:
        raise ValueError(f"{dataset} has {len(rows)} problems; offset {offset} selects none")
    return problems


def messages_for(question: str) -> list[dict[str, str]]:
    """The paper's prompt as one user message: the question, then `INSTRUCTION` on a new line.

    (A user message rather than a system prompt, so templates without a system role work too.)"""
    return [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
