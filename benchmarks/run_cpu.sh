#!/usr/bin/env bash
# The CPU benchmark of benchmarks/RESULTS.md, as it was run (resumable: rerun to continue;
# raise --n to extend the slice). Bounds: `specguard calibrate --dataset gsm8k --offset 900 --n 5
# --max-new-tokens 320 --device cpu --out benchmarks/bounds-qwen2.5-coder-0.5b.json`.
set -euo pipefail
cd "$(dirname "$0")/.."
N_GSM8K=${N_GSM8K:-6}
N_MATH=${N_MATH:-3}
common=(--max-new-tokens 400 --bounds benchmarks/bounds-qwen2.5-coder-0.5b.json --device cpu --dtype bfloat16)
.venv/bin/specguard bench --dataset gsm8k --n "$N_GSM8K" --offset 0 "${common[@]}" --out benchmarks/results/gsm8k
.venv/bin/specguard bench --dataset math500 --n "$N_MATH" --offset 0 "${common[@]}" --out benchmarks/results/math500
