#!/usr/bin/env bash
# The run command: set up, then serve the app on http://127.0.0.1:7860 (GRADIO_SERVER_NAME / _PORT override;
# 127.0.0.1 keeps it to this machine, RLOO_PUBLIC=1 turns on the limits of a public Space).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
