#!/usr/bin/env bash
# The test command: set up everything the tests need, then run them all (CI runs exactly this).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's Chromium for the browser test (Playwright's own browser download cannot work offline), Noto fonts (the
# Georgian page in tests/browser/test_browser_i18n.py needs a font with Georgian script), and Debian's word list for
# scripts/eval_policy.py's real-word rate (/usr/share/dict/words, package wamerican).
if [ ! -x /usr/bin/chromium ] || [ ! -d /usr/share/fonts/truetype/noto ] || [ ! -f /usr/share/dict/words ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-core wamerican >/dev/null
fi
bash scripts/setup.sh --dev
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
