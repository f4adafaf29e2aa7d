#!/usr/bin/env bash
# The first CPU benchmark (benchmarks/notes/2026-11-30-paper-and-fast-presets.md), as it was run. Resumable: rerun to continue (finished
# (problem, method) pairs are kept). It grows both datasets in stages (GSM8K 10 / MATH-500 5, then
# 20 / 10, then N_GSM8K / N_MATH), so a run stopped early still covers both.
# Bounds: `specguard calibrate --dataset gsm8k --offset 900 --n 5 --max-new-tokens 320 --device cpu
# --out benchmarks/bounds-qwen2.5-coder-0.5b.json`.
set -euo pipefail
cd "$(dirname "$0")/.."
N_GSM8K=${N_GSM8K:-30}
N_MATH=${N_MATH:-20}
common=(--max-new-tokens 400 --bounds benchmarks/bounds-qwen2.5-coder-0.5b.json --device cpu --dtype bfloat16)
for stage in "10 5" "20 10" "$N_GSM8K $N_MATH"; do
  read -r g m <<<"$stage"
  g=$((g < N_GSM8K ? g : N_GSM8K)); m=$((m < N_MATH ? m : N_MATH))
  .venv/bin/specguard bench --dataset gsm8k --n "$g" --offset 0 "${common[@]}" --out benchmarks/results/gsm8k
  .venv/bin/specguard bench --dataset math500 --n "$m" --offset 0 "${common[@]}" --out benchmarks/results/math500
done
