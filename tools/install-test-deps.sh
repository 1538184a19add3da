#!/usr/bin/env bash
# What the test suite needs besides the Rust toolchain:
# - Debian's headless Chromium, for the dashboard test (crates/gantry/tests/cli:
#   dashboard_pages_render_in_headless_chromium);
# - Debian's PostgreSQL server binaries (initdb, postgres), for the PostgreSQL store's tests,
#   which start a private server of their own in a temporary directory (no system service is
#   used or needed; gantry_store::test_postgres);
# - Debian's slurmd, for the test that Slurm reads the gres.conf `gantry plan --out` writes
#   (crates/gantry/tests/cli/slurm.rs runs `slurmd -G`; no daemon is started);
# - Debian's libfaketime, to step a controller's wall clock under it
#   (crates/gantry/tests/cli/clock.rs).
# Installs only what is missing; does nothing when all are there.
set -euo pipefail
missing=()
if ! command -v chromium >/dev/null 2>&1; then
  missing+=(chromium)
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  missing+=(libfaketime)
fi
if ! command -v slurmd >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmd ]; then
  missing+=(slurmd)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
