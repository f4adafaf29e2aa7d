"""SpecGuard benchmark: target-only, draft-only, token-level speculative decoding and the
SpecGuard presets compared on the same problems, interleaved problem by problem.

Subpackages, by concern (lower ones never import higher ones):

- `common`: the methods, engines, settings, rows, metrics, the resumable store, plots;
- `reasoning`: GSM8K / MATH-500 answers (`specguard bench`, the default suite);
- `synthetic`: timing with random-weight models of real architectures (`--synthetic`);
- `concurrency`: N clients of one engine (`--concurrency`);
- `tool_calling`: BFCL and the LangChain / LlamaIndex calculator agent (`--suite bfcl|agents`);
- `verifier`: `specguard calibrate` and the data behind `specguard verifier ...`;
- `cli`: the parsers and handlers of `specguard bench` and `specguard calibrate`.

Entry points: `specguard bench ...`, `specguard calibrate ...` (`specguard_bench.cli.parsers`), or
from Python `reasoning.harness.run_bench(common.settings.BenchSettings(...))`,
`synthetic.run.run_synthetic(synthetic.run.SyntheticSettings(...))`. The packages' `__init__`
modules import nothing; heavy modules (torch, transformers, math-verify) are imported by the
modules that need them.
"""

from __future__ import annotations
