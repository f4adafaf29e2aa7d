#!/usr/bin/env bash
# The main comparison (benchmarks/RESULTS.md, benchmarks/notes/2026-12-01-cascade-runs.md), interleaved
# problem by problem in one run per dataset, so every method sees the same machine load. Resumable:
# rerun to continue (finished (problem, method) pairs are kept; the run's settings, the presets
# and the shipped verifier cards must be unchanged). Grows both datasets in stages (GSM8K 5 /
# MATH-500 3, then 10 / 5, 20 / 10, N_GSM8K / N_MATH), so a run stopped early covers both; the
# paper preset and its SD-fallback variant come last, on GSM8K only (the paper preset alone would
# take hours on a CPU at MATH's 800 tokens), in their own folder `cascade-gsm8k-$TAG-paper`.
#   GSM8K 0..N_GSM8K-1:   target, token-sd, draft, specguard-balanced, specguard-fast
#                         (fast = the learned verifier card), then specguard-paper, specguard-paper-sd
#   MATH-500 0..N_MATH-1: the same five
# Caps: GSM8K 400 new tokens (comparable with benchmarks/results/gsm8k); MATH-500 800 (at 400 the
# target was cut on 14 of 20).
# CPU: set CORE=N to pin the run to one core with one torch thread (other jobs then cannot
# disturb its timings; pin them to the other cores), e.g. CORE=0 benchmarks/run_cascade.sh
# Usage: benchmarks/run_cascade.sh [extra bench args, e.g. --device cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N_GSM8K=${N_GSM8K:-30}
N_MATH=${N_MATH:-20}
DEVICE=${DEVICE:-cpu}
TAG=${TAG:-$DEVICE}
pin=()
if [ -n "${CORE:-}" ]; then pin=(taskset -c "$CORE"); export OMP_NUM_THREADS=1; fi
common=(--bounds benchmarks/bounds-qwen2.5-coder-0.5b.json --device "$DEVICE" --dtype bfloat16 --no-progress "$@")
main_methods=target,token-sd,draft,specguard-balanced,specguard-fast
bench() { "${pin[@]}" "$PY" -m specguard bench "$@" "${common[@]}"; }
stages=("5 3" "10 5" "20 10" "$N_GSM8K $N_MATH")
if [ -n "${PAPER_ONLY:-}" ]; then stages=(); fi
for stage in "${stages[@]}"; do
  read -r g m <<<"$stage"
  g=$((g < N_GSM8K ? g : N_GSM8K)); m=$((m < N_MATH ? m : N_MATH))
  bench --dataset gsm8k --n "$g" --offset 0 --max-new-tokens 400 --methods "$main_methods" \
    --out "benchmarks/results/cascade-gsm8k-$TAG"
  bench --dataset math500 --n "$m" --offset 0 --max-new-tokens 800 --methods "$main_methods" \
    --out "benchmarks/results/cascade-math500-$TAG"
done
# the paper presets in a folder of their own (same settings), so they can also run beside the
# main run on another core (PAPER_ONLY=1 CORE=1 ...: only this stage)
bench --dataset gsm8k --n "$N_GSM8K" --offset 0 --max-new-tokens 400 \
  --methods specguard-paper,specguard-paper-sd --out "benchmarks/results/cascade-gsm8k-$TAG-paper"
