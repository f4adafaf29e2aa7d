#!/usr/bin/env bash
# Drift and latency of the target check's rules on fresh slices (problems no preset was tuned or
# reported on: GSM8K test 300-329 and MATH-500 200-219 of the shipped data), 800 new tokens so
# answers can end. Resumable: rerun to continue; grows both datasets in stages so a run stopped
# early still covers both. Methods: the target, token-level SD, balanced (lossless: the check's
# `exact` rule) and balanced with the lossy `typical` rule. One torch thread pinned to CPU
# $BENCH_CPU (default 1; empty: no pinning), so the other core stays free for other work.
# DTYPE (default bfloat16) picks the weights' precision; a run folder holds one precision, so
# another precision writes beside it (`...-cpu1core-float32`). On a CPU without bf16 instructions
# float32 is the faster one.
set -euo pipefail
cd "$(dirname "$0")/.."
N_GSM8K=${N_GSM8K:-30}
N_MATH=${N_MATH:-20}
BENCH_CPU=${BENCH_CPU-1}
pin=(); [ -n "$BENCH_CPU" ] && pin=(taskset -c "$BENCH_CPU")
DTYPE=${DTYPE:-bfloat16}
suffix=""; [ "$DTYPE" != bfloat16 ] && suffix="-$DTYPE"
methods=${METHODS:-target,token-sd,specguard-balanced,specguard-balanced-typical}
common=(--max-new-tokens 800 --device cpu --dtype "$DTYPE" --threads 1 --methods "$methods" --no-progress)
for stage in "3 2" "10 5" "$N_GSM8K $N_MATH"; do
  read -r g m <<<"$stage"
  g=$((g < N_GSM8K ? g : N_GSM8K)); m=$((m < N_MATH ? m : N_MATH))
  "${pin[@]}" .venv/bin/specguard bench --dataset gsm8k --n "$g" --offset 300 "${common[@]}" \
    --out "benchmarks/results/drift-gsm8k-300-cpu1core$suffix"
  "${pin[@]}" .venv/bin/specguard bench --dataset math500 --n "$m" --offset 200 "${common[@]}" \
    --out "benchmarks/results/drift-math500-200-cpu1core$suffix"
done
