#!/usr/bin/env bash
# Create .venv with Python 3.11 and install the pinned requirements (idempotent; a second run is quick).
#   bash scripts/setup.sh          runtime only
#   bash scripts/setup.sh --dev    plus the test tools
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || { echo "error: $PY not found; install Python 3.11 or set PYTHON=" >&2; exit 2; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
req=requirements.txt
[ "${1:-}" = "--dev" ] && req=requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
