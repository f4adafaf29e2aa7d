"""The benchmark run: all methods on the same problems, interleaved problem by problem, resumable.

Output directory (`BenchSettings.out_dir`): `results.jsonl` and `run.json`, the resumable store
(`specguard_bench.store`), and the reports:

- `summary.json`, `results.md`, `results.png`: rewritten at the end of every run from all rows of
  the selected problems and methods.

Within one problem the methods run in a rotated order (problem i starts with method i mod m), so
no method is always first after a model switch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from specguard_bench.answers import grade
from specguard_bench.data import Problem, load_file, load_problems, messages_for
from specguard_bench.drift import drift_summary, drift_table
from specguard_bench.engines import Engines, PairSettings, ServedTarget, base_config
from specguard_bench.methods import (
    METHODS,
    REMOTE_METHOD,
    REMOTE_VARIANT,
    VARIANTS,
    MethodOutput,
    check_methods,
    preset_of,
    run_method,
    specguard_config,
)
from specguard_bench.metrics import ProblemRow, markdown_table, specguard_fields, summarize
from specguard_bench.store import (
    RESULTS,
    TaskT,
    append_row,
    check_resume,
    load_rows,
    pending_pairs,
)
from specguard_core.config import PRESETS, EngineConfig, NormBounds, SpecGuardConfig
from specguard_core.verifiers import SHIPPED_DIR

SUMMARY, TABLE, PLOT = "summary.json", "results.md", "results.png"
WARMUP_PROMPT = "What is 2 + 3?"


@dataclass(frozen=True)
class BenchSettings(PairSettings):
    """Everything a benchmark run depends on (the pair's fields are keyword-only);
    `bounds_path` is a NormBounds JSON."""

    out_dir: Path
    dataset: str = "gsm8k"
    n: int = 20
    offset: int = 0
    seed: int = 0
    methods: tuple[str, ...] = METHODS
    max_new_tokens: int = 700
    bounds_path: Path | None = None
    warmup: bool = True
    dataset_file: Path | None = None  # a JSONL of your own problems instead of `dataset`
    served: ServedTarget | None = None  # a target on a vLLM server: adds `specguard-remote`

    def fingerprint(self, bounds: NormBounds | None) -> dict[str, Any]:
        """The settings that change a (problem, method) result; resuming requires equality.
        The values of the presets and variants the run's methods use are part of it, so a method
        is never resumed across a change of its preset; other presets and variants are not (see
        `store.check_resume`: a run can gain methods)."""
        used = {name for m in self.methods if (name := preset_of(m)) is not None}
        variants = {name: VARIANTS[name] for name in sorted(used & set(VARIANTS))}
        presets = ({name for name in used if name in PRESETS}
                   | {base for base, _ in variants.values()}
                   | ({REMOTE_VARIANT[0]} if self.served else set()))
        return {
            "seed": self.seed,
            "presets": {name: dict(sorted(PRESETS[name].items())) for name in sorted(presets)},
            "variants": {name: [base, dict(sorted(fixed.items()))]
                         for name, (base, fixed) in variants.items()},
            "sets": dict(sorted(self.sets.items())),
            "max_new_tokens": self.max_new_tokens,
            "draft": self.draft,
            "target": self.target,
            "device": self.device,
            "dtype": self.dtype,
            "bounds": bounds.model_dump() if bounds is not None else None,
            # what verifier="auto" may resolve to: a retrained card is a new run
            "shipped_cards": shipped_cards(),
            # only when set, so runs stored before the field existed still resume
            **({"heterogeneous": True} if self.heterogeneous else {}),
            **({"batching": True} if self.batching else {}),
            **({"max_batch_rows": self.max_batch_rows}
               if self.max_batch_rows not in (None, EngineConfig().max_batch_rows) else {}),
            **({"served_target": self.served.fingerprint()} if self.served else {}),
            **({"load": loading} if (loading := self.load_fingerprint()) else {}),
        }


def shipped_cards() -> dict[str, str]:
    """sha256 of each verifier card shipped with the package, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(SHIPPED_DIR.glob("*.json"))}


# --------------------------------------------------------------------------- running


def run_pair(
    engine: Any, problem: Problem, method: str, settings: BenchSettings, bounds: NormBounds | None
) -> ProblemRow:
    """Run one method on one problem, grade it, and build its row."""
    return problem_row(problem, method, generate(engine, problem, method, settings, bounds))


def generate(
    engine: Any, problem: Problem, method: str, settings: BenchSettings, bounds: NormBounds | None
) -> MethodOutput:
    """Run one method on one problem, timed (no grading: math-verify's timeout needs the main
    thread, and this may run in a client thread)."""
    return run_method(
        engine,
        method,
        messages_for(problem.question),
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed * 1_000_003 + problem.index,
        sets=settings.sets,
        bounds=bounds,
    )


def problem_row(problem: Problem, method: str, out: MethodOutput) -> ProblemRow:
    """Grade one method's output on one problem (in the main thread) and build its row."""
    verdict = grade(out.text, problem.gold)
    row = ProblemRow(
        uid=problem.uid,
        dataset=problem.dataset,
        index=problem.index,
        method=method,
        correct=verdict.correct,
        predicted=verdict.predicted,
        gold=problem.gold,
        latency_s=out.latency_s,
        new_tokens=out.new_tokens,
        prompt_tokens=out.prompt_tokens,
        finish_reason=out.finish_reason,
        text=out.text,
        prefilled_draft=out.prefilled_draft,
        prefilled_target=out.prefilled_target,
    )
    if out.result is not None:
        for key, value in specguard_fields(out.result).items():
            setattr(row, key, value)
    return row


def warm_up(engine: Any, methods: Sequence[str], settings: BenchSettings) -> None:
    """One short untimed run of each method (lazy initialisation, kernel selection, caches)."""
    for method in methods:
        run_method(
            engine,
            method,
            messages_for(WARMUP_PROMPT),
            max_new_tokens=8,
            seed=settings.seed,
            sets=settings.sets,
        )


def iterate_pairs(pairs: list[tuple[TaskT, str]], progress: bool, desc: str = "bench"
                  ) -> Iterator[tuple[TaskT, str]]:
    """The (task, method) pairs with a progress bar (`desc`) showing the current pair."""
    with tqdm(total=len(pairs), desc=desc, unit="run", disable=not progress) as bar:
        for problem, method in pairs:
            bar.set_postfix_str(f"{problem.uid} {method}")
            yield problem, method
            bar.update(1)


# --------------------------------------------------------------------------- reports


def source_commit() -> str | None:
    """The git commit of the checkout this package runs from (None outside a git checkout), with
    "+dirty" when tracked files differ from it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def machine_line(env: Mapping[str, Any]) -> str:
    """The machine a run's figures come from, for a report's header: device, threads, the CPUs
    the process may use, the commit."""
    cpus = env.get("cpus_allowed")
    pinned = f" on {cpus} of {env.get('cpu_count')} CPUs" if cpus else ""
    commit = f", commit {env['commit']}" if env.get("commit") else ""
    return (f"{env.get('device_name')} ({env.get('device')}), {env.get('torch_threads')} torch "
            f"threads{pinned}{commit}")


def environment(engine: Any = None) -> dict[str, Any]:
    """Versions and hardware for the summary (device details only when an engine is given)."""
    import torch
    import transformers

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "commit": source_commit(),
        "device": None,
        "device_name": platform.processor() or platform.machine(),
    }
    if engine is not None:
        target = getattr(engine.target, "model", None)  # None: a target on a vLLM server
        device = next((target if target is not None else engine.draft.model).parameters()).device
        if device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(device)
        env["device"] = str(device)
        env["draft_dtype"] = str(next(engine.draft.model.parameters()).dtype)
        env["target_dtype"] = (str(next(target.parameters()).dtype) if target is not None
                               else f"served by {engine.target.name}")
    return env


def build_summary(
    rows: Sequence[ProblemRow],
    settings: BenchSettings,
    bounds: NormBounds | None,
    base: SpecGuardConfig,
    env: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary JSON: settings, bounds (path and values), the full config of each SpecGuard
    method (from the engine's `base` config), the environment `env`, and one `MethodSummary`
    per method."""
    summaries = summarize(rows, settings.methods)
    drifts = drift_summary(rows, settings.methods)
    configs = {
        m: specguard_config(
            base, m, settings.sets, max_new_tokens=settings.max_new_tokens, bounds=bounds
        ).model_dump(mode="json")
        for m in settings.methods
        if preset_of(m) is not None
    }
    used = bounds if bounds is not None else base.bounds
    return {
        "settings": {
            **settings.fingerprint(bounds),
            "dataset": settings.dataset_file.stem if settings.dataset_file else settings.dataset,
            "dataset_file": str(settings.dataset_file) if settings.dataset_file else None,
            "n": settings.n,
            "offset": settings.offset,
            "methods": list(settings.methods),
            "out_dir": str(settings.out_dir),
        },
        "bounds": {
            "path": str(settings.bounds_path) if settings.bounds_path else None,
            "values": used.model_dump(),
            "calibrated": bounds is not None,
        },
        "configs": configs,
        "environment": dict(env),
        "n_problems": len({r.uid for r in rows}),
        "methods": {m: s.to_dict() for m, s in summaries.items()},
        "table": markdown_table(summaries),
        "drift": {m: d.to_dict() for m, d in drifts.items()},
        "drift_table": drift_table(drifts),
    }


def write_reports(out_dir: Path, summary: Mapping[str, Any]) -> None:
    """Write summary.json, results.md (table + settings) and results.png."""
    from specguard_bench.plot import plot_bench

    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    s = summary["settings"]
    header = (
        f"# SpecGuard benchmark: {s['dataset']} problems {s['offset']}.."
        f"{s['offset'] + summary['n_problems'] - 1}\n\n"
        f"draft `{s['draft']}`, target `{s['target']}`"
        + (f" ({REMOTE_METHOD}: `{s['served_target']['model']}` at {s['served_target']['url']})"
           if "served_target" in s else "")
        + f", {machine_line(summary['environment'])}, {s['dtype']}, max {s['max_new_tokens']} new "
        f"tokens, bounds: {summary['bounds']['path'] or 'defaults (uncalibrated)'}\n\n"
    )
    drift = summary.get("drift_table") or ""
    (out_dir / TABLE).write_text(header + summary["table"]
                                 + (f"\n## Drift from the target's text\n\n{drift}" if drift else ""))
    plot_bench(summary, out_dir / PLOT)


def _previous_environment(out_dir: Path, device: str) -> dict[str, Any]:
    """The environment recorded by the last run in `out_dir` (nothing ran this time); this
    machine's, with the requested `device`, if that run was stopped before it wrote a summary."""
    path = out_dir / SUMMARY
    if path.exists():
        return dict(json.loads(path.read_text()).get("environment", {}))
    return {**environment(), "device": device}


def selected_problems(settings: BenchSettings) -> list[Problem]:
    """The run's problems: `n` from `offset` of the dataset or of `dataset_file`."""
    if settings.dataset_file:
        return load_file(settings.dataset_file, settings.n, settings.offset)
    return load_problems(settings.dataset, settings.n, settings.offset)


def run_bench(settings: BenchSettings, engine: Any = None, remote_engine: Any = None
              ) -> dict[str, Any]:
    """Run (or resume) the benchmark; return the summary dict (also written to disk).

    `engine`: an already-built SpecGuardEngine (tests, notebooks); loaded from
    `settings.draft/target` otherwise (and only when a method needs it); `remote_engine` the same
    for `specguard-remote` (loaded from `settings.served`). Raises ResumeMismatch if `out_dir`
    holds results made with other settings, ValueError for bad dataset/method names.
    """
    methods = check_methods(settings.methods, remote=settings.served is not None)
    problems = selected_problems(settings)
    bounds = NormBounds.load(settings.bounds_path) if settings.bounds_path else None
    out_dir = settings.out_dir
    check_resume(out_dir, settings.fingerprint(bounds))
    results = out_dir / RESULTS
    done = {(r.uid, r.method) for r in load_rows(results)}
    pairs = pending_pairs(problems, methods, done)
    engines = Engines(settings, settings.served, local=engine, remote=remote_engine)
    if pairs:
        if settings.warmup:
            for method in sorted({m for _, m in pairs}):
                warm_up(engines.for_method(method), [method], settings)
        for problem, method in iterate_pairs(pairs, settings.progress):
            append_row(results, run_pair(engines.for_method(method), problem, method, settings,
                                         bounds))
    wanted = {p.uid for p in problems}
    rows = [r for r in load_rows(results) if r.uid in wanted and r.method in methods]
    engine = engines.any()
    base = engine.config if engine is not None else base_config(settings.sets)
    env = environment(engine) if engine is not None else _previous_environment(out_dir, settings.device)
    summary = build_summary(rows, settings, bounds, base, env)
    write_reports(out_dir, summary)
    return summary
