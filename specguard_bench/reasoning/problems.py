"""Benchmark problems (GSM8K, MATH-500) shipped with the package, and the paper's prompt.

The files live in `specguard_bench/data/` (see its README for source and licence). Problems keep
their file order, so `offset`/`n` name the same slice everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DATASETS: dict[str, str] = {"gsm8k": "gsm8k.jsonl", "math500": "math500.jsonl"}
# default new-token caps: at 400 the target was cut on 14 of MATH-500's first 20 problems
DEFAULT_MAX_NEW_TOKENS: dict[str, int] = {"gsm8k": 700, "math500": 800}
FILE_MAX_NEW_TOKENS = 800


@dataclass(frozen=True)
class Problem:
    """One benchmark problem. `uid` (`<dataset>/<row index>`) is stable across runs."""

    uid: str
    dataset: str
    index: int
    question: str
    gold: str
    solution: str = ""  # the worked answer (GSM8K's `answer`, MATH's `solution`) when given


def gsm8k_gold(answer: str) -> str:
    """The final number of a GSM8K worked answer (the text after `####`), thousands separators
    removed: `"... #### 1,600"` -> `"1600"`."""
    if "####" not in answer:
        raise ValueError("a GSM8K answer must end with '#### <number>'")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _problem(dataset: str, index: int, row: dict[str, Any]) -> Problem:
    if dataset == "gsm8k":
        return Problem(f"gsm8k/{index}", dataset, index, row["question"], gsm8k_gold(row["answer"]),
                       row["answer"])
    return Problem(f"math500/{index}", dataset, index, row["problem"], str(row["answer"]),
                   str(row.get("solution", "")))


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


def load_file(path: str | Path, n: int | None = None, offset: int = 0) -> list[Problem]:
    """Problems `offset .. offset+n-1` of a JSONL file of your own: each line a JSON object with
    GSM8K's `question`/`answer` fields (the gold is the text after `####` when there is one, else
    the whole answer) or MATH's `problem`/`answer`. `uid` is `<file stem>/<line index>`.

    Raises ValueError naming the line that is not JSON or lacks the fields."""
    if offset < 0 or (n is not None and n < 0):
        raise ValueError("offset and n must be >= 0")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--dataset-file {path} does not exist")
    name = path.stem
    lines = [ln for ln in path.read_text("utf-8").splitlines() if ln.strip()]
    end = len(lines) if n is None else min(len(lines), offset + n)
    problems = []
    for i in range(offset, end):
        try:
            row = json.loads(lines[i])
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: problem {i} is not JSON ({err})") from None
        if not isinstance(row, dict) or "answer" not in row or not (
                "question" in row or "problem" in row):
            raise ValueError(f"{path}: problem {i} needs `question`+`answer` (GSM8K) or "
                             "`problem`+`answer` (MATH) fields")
        question = str(row.get("question", row.get("problem")))
        answer = str(row["answer"])
        gold = gsm8k_gold(answer) if "####" in answer else answer.strip()
        problems.append(Problem(f"{name}/{i}", name, i, question, gold,
                                str(row.get("solution", answer))))
    if not problems:
        raise ValueError(f"{path} has {len(lines)} problems; offset {offset} selects none")
    return problems


def messages_for(question: str) -> list[dict[str, str]]:
    """The paper's prompt as one user message: the question, then `INSTRUCTION` on a new line.

    (A user message rather than a system prompt, so templates without a system role work too.)"""
    return [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
