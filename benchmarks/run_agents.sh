#!/usr/bin/env bash
# The agent benchmarks on the default pair, CPU. Resumable: rerun to continue; grows in
# stages so a run stopped early still covers every category. BFCL: the first ids of each category;
# agents: GSM8K test problems, and their worked answers as expressions, with calculator tools
# through LangChain and LlamaIndex. One torch thread pinned to CPU $BENCH_CPU (default 1; empty:
# no pinning). DTYPE (default bfloat16) picks
# the weights' precision; another precision writes beside it (`...-cpu1core-float32`). On a CPU
# without bf16 instructions float32 is the faster one.
set -euo pipefail
cd "$(dirname "$0")/.."
N_BFCL=${N_BFCL:-30}
N_AGENTS=${N_AGENTS:-20}
BENCH_CPU=${BENCH_CPU-1}
pin=(); [ -n "$BENCH_CPU" ] && pin=(taskset -c "$BENCH_CPU")
DTYPE=${DTYPE:-bfloat16}
suffix=""; [ "$DTYPE" != bfloat16 ] && suffix="-$DTYPE"
common=(--device cpu --dtype "$DTYPE" --threads 1 --no-progress)
for stage in "3 2" "10 5" "$N_BFCL $N_AGENTS"; do
  read -r b a <<<"$stage"
  b=$((b < N_BFCL ? b : N_BFCL)); a=$((a < N_AGENTS ? a : N_AGENTS))
  "${pin[@]}" .venv/bin/specguard bench --suite agents --n "$a" --methods target,token-sd,specguard-balanced \
    "${common[@]}" --out "benchmarks/results/agents-gsm8k-cpu1core$suffix"
  "${pin[@]}" .venv/bin/specguard bench --suite agents --agent-task expression --n "$a" \
    --methods target,token-sd,specguard-balanced "${common[@]}" \
    --out "benchmarks/results/agents-gsm8k-expression-cpu1core$suffix"
  "${pin[@]}" .venv/bin/specguard bench --suite bfcl --n "$b" \
    --methods target,token-sd,specguard-balanced,specguard-fast,draft \
    "${common[@]}" --out "benchmarks/results/agents-bfcl-cpu1core$suffix"
done
