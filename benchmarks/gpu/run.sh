#!/usr/bin/env bash
# The GPU check, in one command (see benchmarks/gpu/README.md): installs the carried wheels, runs the
# device-parametrised tests on CUDA, measures forward costs (costs.py) and projects per-method
# latency from the recorded CPU runs' traces (project.py). Everything goes under $OUT (default
# ./gpu-out); the whole run keeps under TOTAL_S seconds (default 450, i.e. 7.5 minutes).
#
#   bash benchmarks/gpu/run.sh                      # on the GPU machine
#   SPECGUARD_GPU_SKIP_INSTALL=1 OUT=gpu-out-cpu bash benchmarks/gpu/run.sh --tiny --device cpu
#
# Arguments are passed to costs.py (--tiny, --device, --pairs, --repeats, ...). Environment:
#   OUT                          output folder (default ./gpu-out)
#   PYTHON                       the interpreter (default python3)
#   SPECGUARD_GPU_SKIP_INSTALL=1 do not install benchmarks/gpu/wheels/
#   SPECGUARD_GPU_SKIP_TESTS=1   do not run the CUDA tests (skipped anyway when torch sees no GPU)
#   DEPS                         where the wheels are installed (default: a new temporary folder)
#   TOTAL_S, TESTS_TIMEOUT_S     the time limits (defaults 450 and 180 seconds)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-$(command -v python3 || command -v python)}
TOTAL_S=${TOTAL_S:-450}
TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-180}
GPU_TESTS=(tests/specguard_core/engine/test_engine.py tests/specguard_core/engine/test_fallback.py
           tests/specguard_core/engine/test_speculative.py tests/specguard_core/decoding/test_sampling.py
           tests/specguard_core/concurrency/test_padded.py tests/specguard_core/concurrency/test_batcher.py
           tests/benchmarks_gpu/test_costs.py)
status=0
: >"$OUT/run.log"
log() { echo "[run.sh +$((SECONDS))s] $*" | tee -a "$OUT/run.log"; }
step() { echo "| $1 | $2 | $3 |" >>"$OUT/SUMMARY.md"; }
printf '# GPU check\n\n| step | result | output |\n|---|---|---|\n' >"$OUT/SUMMARY.md"

# 1. the wheels the machine lacks (pydantic, jsonschema, pytest, ...), into a folder of their own
if [[ "${SPECGUARD_GPU_SKIP_INSTALL:-0}" == 1 ]]; then
  step install skipped "SPECGUARD_GPU_SKIP_INSTALL=1"
elif compgen -G "benchmarks/gpu/wheels/*.whl" >/dev/null; then
  DEPS=${DEPS:-$(mktemp -d -t specguard-gpu-deps.XXXXXX)}
  mkdir -p "$DEPS"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install --no-index --find-links benchmarks/gpu/wheels --target "$DEPS" --upgrade \
      -r benchmarks/gpu/wheels.txt >"$OUT/install.txt" 2>&1
  else  # no pip: a wheel is a zip of importable files
    for w in benchmarks/gpu/wheels/*.whl; do "$PY" -m zipfile -e "$w" "$DEPS"; done >"$OUT/install.txt" 2>&1
  fi
  rc=$?
  export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
  if [[ $rc != 0 ]]; then
    status=1; step install "FAILED (rc $rc)" install.txt
    log "wheel install failed; see $OUT/install.txt (wheels for another Python? README.md)"
  else
    step install ok "install.txt ($DEPS)"
  fi
else
  step install "no wheels" "benchmarks/gpu/wheels/ is empty: see README.md"
  log "no wheels under benchmarks/gpu/wheels/: using what is installed"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# 2. the environment, and whether torch sees a GPU
"$PY" - >"$OUT/env.txt" 2>&1 <<'EOF'
import platform, shutil, subprocess
from importlib.metadata import version
import torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", version("transformers"))
print("cuda_available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    print("gpu", i, torch.cuda.get_device_name(i))
for name in ("pydantic", "jsonschema", "threadpoolctl", "pytest"):
    try:
        print(name, __import__(name).__version__ if name != "jsonschema" else "ok")
    except Exception as err:  # reported, the steps that need it fail with their own message
        print(name, "MISSING", err)
if shutil.which("nvidia-smi"):
    print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout)
EOF
cuda=$(grep -c "^cuda_available True" "$OUT/env.txt")
log "environment: $(head -1 "$OUT/env.txt"); GPU: $cuda"

# 3. the device-parametrised tests, their CUDA half
if [[ "${SPECGUARD_GPU_SKIP_TESTS:-0}" == 1 || $cuda == 0 ]]; then
  step "CUDA tests" skipped "$([[ $cuda == 0 ]] && echo 'torch sees no GPU' || echo 'SPECGUARD_GPU_SKIP_TESTS=1')"
else
  log "CUDA tests (at most ${TESTS_TIMEOUT_S}s)"
  timeout "$TESTS_TIMEOUT_S" "$PY" -m pytest -q -p no:cacheprovider -rfE --durations=15 -k cuda \
    "${GPU_TESTS[@]}" --junitxml "$OUT/pytest.xml" >"$OUT/pytest.txt" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  step "CUDA tests" "$([[ $rc == 0 ]] && echo ok || echo "FAILED (rc $rc)"): $(tail -1 "$OUT/pytest.txt")" pytest.txt
fi

# 4. forward costs, within what is left of the time (costs.json is written after every model)
left=$((TOTAL_S - SECONDS))
budget=$((left - 90))
if ((budget < 20)); then
  status=1; step costs "not run" "only ${left}s left of TOTAL_S=${TOTAL_S}"
else
  log "costs (budget ${budget}s, killed at $((left - 30))s)"
  timeout "$((left - 30))" "$PY" -m benchmarks.gpu.costs --out "$OUT" --budget-s "$budget" "$@" \
    >"$OUT/costs.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  step costs "$([[ $rc == 0 ]] && echo ok || echo "FAILED (rc $rc)")" "costs.json, costs.md, costs.log"
fi

# 5. the projection of the recorded runs with these costs
if [[ -s "$OUT/costs.json" ]]; then
  "$PY" -m benchmarks.gpu.project --costs "$OUT/costs.json" --out "$OUT" >"$OUT/project.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  step projection "$([[ $rc == 0 ]] && echo ok || echo "FAILED (rc $rc)")" "projection.md, project.log"
else
  status=1; step projection "not run" "no costs.json"
fi
log "done in ${SECONDS}s, status $status"
echo "" >>"$OUT/SUMMARY.md"; echo "status $status after ${SECONDS}s" >>"$OUT/SUMMARY.md"
exit $status
