#!/usr/bin/env bash
# What the test suite needs besides the Rust toolchain: Debian's headless Chromium, for the
# dashboard test (crates/gantry/tests/cli: dashboard_pages_render_in_headless_chromium).
# Does nothing when chromium is already installed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends chromium
