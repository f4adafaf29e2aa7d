"""SpecGuard benchmark harness: target-only, draft-only, token-level speculative decoding and the
SpecGuard presets on GSM8K / MATH-500, interleaved problem by problem; plus a synthetic mode with
random-weight models of real architectures.

Entry points: `specguard bench ...`, `specguard calibrate ...` (see `specguard_bench.cli`), or
`run_bench(BenchSettings(...))` / `run_synthetic(SyntheticSettings(...))` from Python.
Heavy modules (torch, transformers, math-verify) are imported by the submodules that need them.
"""

from __future__ import annotations

