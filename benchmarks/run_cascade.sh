#!/usr/bin/env bash
# The comparison of issue 15 (speculative fallback, three-way decision, balanced preset), interleaved
# problem by problem in one run per dataset, so every method sees the same machine load. Resumable:
# rerun to continue (finished (problem, method) pairs are kept). Grows both datasets in stages
# (GSM8K 10 / MATH-500 5, then 20 / 10, then N_GSM8K / N_MATH), so a run stopped early covers both.
#   GSM8K 0..N_GSM8K-1:  target, token-sd, draft, specguard-balanced, specguard-learned,
#                        specguard-fast, specguard-paper, specguard-paper-sd
#   MATH-500 0..N_MATH-1: target, token-sd, draft, specguard-balanced, specguard-learned (the paper preset alone
#                        would take hours on a CPU at 800 tokens)
# Caps: GSM8K 700 new tokens would be the bench default; 400 keeps it comparable with
# benchmarks/results/gsm8k; MATH-500 at 800 (at 400 the target was cut on 14 of 20).
# Usage: benchmarks/run_cascade.sh [extra bench args, e.g. --device cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N_GSM8K=${N_GSM8K:-30}
N_MATH=${N_MATH:-20}
DEVICE=${DEVICE:-cpu}
TAG=${TAG:-$DEVICE}
common=(--bounds benchmarks/bounds-qwen2.5-coder-0.5b.json --device "$DEVICE" --dtype bfloat16 "$@")
gsm_methods=target,token-sd,draft,specguard-balanced,specguard-learned,specguard-fast,specguard-paper,specguard-paper-sd
math_methods=target,token-sd,draft,specguard-balanced,specguard-learned
for stage in "10 5" "20 10" "$N_GSM8K $N_MATH"; do
  read -r g m <<<"$stage"
  g=$((g < N_GSM8K ? g : N_GSM8K)); m=$((m < N_MATH ? m : N_MATH))
  "$PY" -m specguard bench --dataset gsm8k --n "$g" --offset 0 --max-new-tokens 400 \
    --methods "$gsm_methods" "${common[@]}" --out "benchmarks/results/cascade-gsm8k-$TAG"
  "$PY" -m specguard bench --dataset math500 --n "$m" --offset 0 --max-new-tokens 800 \
    --methods "$math_methods" "${common[@]}" --out "benchmarks/results/cascade-math500-$TAG"
done
