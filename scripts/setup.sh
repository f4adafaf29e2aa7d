#!/usr/bin/env bash
# Set up a virtual environment in .venv with everything the project, its examples and tests need.
# torch is pinned first: 2.13.0 is a CPU wheel available locally on our machines; the project's own
# requirement is a range that it satisfies, so pip installs nothing bigger afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${SPECGUARD_TORCH:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[all]"
echo "ready: . .venv/bin/activate"
