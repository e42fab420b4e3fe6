#!/usr/bin/env bash
# Make sure this machine has a headless Chromium for the HTML report's browser tests: installs
# Debian's `chromium` package with apt-get when no chromium is on PATH. Idempotent: a second run
# changes nothing. Needs root (or sudo) for the install.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

say() { printf 'ensure-chromium: %s\n' "$*" >&2; }

find_chromium() { command -v chromium || command -v chromium-browser || true; }

if [ -n "$(find_chromium)" ]; then
  say "found $(find_chromium)"
  exit 0
fi

say "installing Debian's chromium package"
# The package lists may be empty or stale on a fresh machine: refresh them when the package
# is unknown to apt-cache.
if ! apt-cache show chromium >/dev/null 2>&1; then
  $SUDO apt-get update -qq
fi
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium; then
  say "install failed; refreshing the package lists and trying again"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
fi

if [ -z "$(find_chromium)" ]; then
  say "chromium is still not on PATH after the install"
  exit 1
fi
say "installed $(find_chromium)"
