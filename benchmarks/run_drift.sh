#!/usr/bin/env bash
# Drift and latency of the target check's rules on fresh slices (problems no preset was tuned or
# reported on: GSM8K test 300-329 and MATH-500 200-219 of the shipped data), 800 new tokens so
# answers can end. Resumable: rerun to continue; grows both datasets in stages so a run stopped
# early still covers both. Methods: the target, token-level SD, and balanced with each rule
# (typical: the preset; exact: lossless; exact-numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
N_GSM8K=${N_GSM8K:-30}
N_MATH=${N_MATH:-20}
methods=target,token-sd,specguard-balanced,specguard-balanced-exact,specguard-balanced-numbers
common=(--max-new-tokens 800 --device cpu --dtype bfloat16 --methods "$methods" --no-progress)
for stage in "3 2" "10 5" "$N_GSM8K $N_MATH"; do
  read -r g m <<<"$stage"
  g=$((g < N_GSM8K ? g : N_GSM8K)); m=$((m < N_MATH ? m : N_MATH))
  .venv/bin/specguard bench --dataset gsm8k --n "$g" --offset 300 "${common[@]}" --out benchmarks/results/drift-gsm8k-300
  .venv/bin/specguard bench --dataset math500 --n "$m" --offset 200 "${common[@]}" --out benchmarks/results/drift-math500-200
done
