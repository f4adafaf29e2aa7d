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

from specguard_bench.common.files import BenchFileError, one_line, read_text
from specguard_bench.common.store import digest

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

    @property
    def digest(self) -> str:
        """A hash of what the problem asks and what counts as right (a resumed run's check)."""
        return digest(self.question, self.gold)


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
    """Problems `offset .. offset+n-1` of a JSONL file of your own (UTF-8): each line a JSON
    object with GSM8K's `question`/`answer` fields (the gold is the text after `####` when there
    is one, else the whole answer) or MATH's `problem`/`answer`; the question a non-empty string,
    the answer a string or a number. `uid` is `<file stem>/<index>`, counting non-blank lines.

    Raises BenchFileError (a ValueError) naming the file and line that is not JSON or lacks the
    fields."""
    if offset < 0 or (n is not None and n < 0):
        raise ValueError("offset and n must be >= 0")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--dataset-file {path} does not exist")
    numbered = [(i + 1, ln) for i, ln in enumerate(read_text(path).splitlines()) if ln.strip()]
    end = len(numbered) if n is None else min(len(numbered), offset + n)
    problems = []
    for i in range(offset, end):
        line_no, text = numbered[i]
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise BenchFileError(f"{path}:{line_no}: not JSON ({one_line(err)})") from None
        question, answer = _fields(row, f"{path}:{line_no}")
        gold = gsm8k_gold(answer) if "####" in answer else answer.strip()
        if not gold:
            raise BenchFileError(f"{path}:{line_no}: the answer has no gold after '####'")
        problems.append(Problem(f"{path.stem}/{i}", path.stem, i, question, gold,
                                str(row.get("solution", answer))))
    if not problems:
        raise ValueError(f"{path} has {len(numbered)} problems; offset {offset} selects none")
    return problems


def _fields(row: Any, where: str) -> tuple[str, str]:
    """(question, answer) of one line of a problems file; BenchFileError naming `where`."""
    if not isinstance(row, dict) or "answer" not in row or not (
            "question" in row or "problem" in row):
        raise BenchFileError(f"{where}: a problem needs `question`+`answer` (GSM8K) or "
                             "`problem`+`answer` (MATH) fields")
    question, answer = row.get("question", row.get("problem")), row["answer"]
    if not isinstance(question, str) or not question.strip():
        raise BenchFileError(f"{where}: the question must be a non-empty string, got "
                             f"{_shown(question)}")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or \
            not str(answer).strip():
        raise BenchFileError(f"{where}: the answer must be a non-empty string or a number, "
                             f"got {_shown(answer)}")
    return question, str(answer)


def _shown(value: Any) -> str:
    """A refused value, short: JSON's name for its type and, for a scalar, the value."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return json.dumps(value)[:40]


def messages_for(question: str) -> list[dict[str, str]]:
    """The paper's prompt as one user message: the question, then `INSTRUCTION` on a new line.

    (A user message rather than a system prompt, so templates without a system role work too.)"""
    return [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
