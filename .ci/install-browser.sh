#!/usr/bin/env bash
# The browser the browser tests (test/browser/, npm run test:browser) drive through playwright-core:
# Debian's chromium at /usr/bin/chromium. Idempotent and quiet: installs it only when it is missing
# (apt-get update only when a first attempt fails). Exits non-zero on failure.
set -euo pipefail

[ -x /usr/bin/chromium ] && exit 0

export DEBIAN_FRONTEND=noninteractive
# With what it recommends: its fonts, without which the test page's screenshot is boxes.
install() { apt-get install -y -qq chromium > /dev/null 2>&1; }
if ! install; then
  apt-get update -qq > /dev/null
  apt-get install -y -qq chromium > /dev/null
fi

[ -x /usr/bin/chromium ] || { echo "install-browser: chromium did not install /usr/bin/chromium" >&2; exit 1; }
