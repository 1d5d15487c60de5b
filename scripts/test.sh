#!/usr/bin/env bash
# The test command: set up everything the tests need, then run them all (CI runs exactly this).
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's Chromium for the browser test (Playwright's own browser download cannot work offline), and Noto fonts:
# the Georgian page (tests/test_browser_i18n.py) needs a font with Georgian script.
if [ ! -x /usr/bin/chromium ] || [ ! -d /usr/share/fonts/truetype/noto ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-core >/dev/null
fi
bash scripts/setup.sh --dev
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
