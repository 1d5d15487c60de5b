#!/usr/bin/env bash
# The run command: set up, then serve the app on http://localhost:7860 (GRADIO_SERVER_NAME / _PORT override).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python app.py "$@"
