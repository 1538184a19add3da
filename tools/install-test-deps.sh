#!/usr/bin/env bash
# What the test suite needs besides the Rust toolchain:
# - Debian's headless Chromium, for the dashboard test (crates/gantry/tests/cli:
#   dashboard_pages_render_in_headless_chromium);
# - Debian's PostgreSQL server binaries (initdb, postgres), for the PostgreSQL store's tests,
#   which start a private server of their own in a temporary directory (no system service is
#   used or needed; gantry_store::test_postgres);
# - Debian's slurmd, for the test that Slurm reads the gres.conf `gantry plan --out` writes
#   (crates/gantry/tests/cli/slurm.rs runs `slurmd -G`), and slurmctld, slurm-client and munge
#   for the test that re-checks tools/slurm-compare's reference against a private real Slurm
#   (tools/slurm-private.sh starts it in a temporary directory; nothing system-wide);
# - Debian's libfaketime, to step a controller's wall clock under it
#   (crates/gantry/tests/cli/clock.rs);
# - Debian's prometheus, for promtool's linter and a real Prometheus server scraping a
#   controller (crates/gantry/tests/cli/prometheus.rs; the test starts its own server on a
#   free loopback port, nothing system-wide is used).
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
if [ ! -x /usr/bin/promtool ] || [ ! -x /usr/bin/prometheus ]; then
  missing+=(prometheus)
fi
# Each daemon and the Debian package it comes in.
for pair in slurmd:slurmd slurmctld:slurmctld munged:munge; do
  daemon=${pair%%:*}
  if ! command -v "$daemon" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$daemon" ]; then
    missing+=("${pair#*:}")
  fi
done
# Slurm's client commands (sbatch, squeue, scontrol, ...) come from slurm-client.
if [ ! -x /usr/bin/scontrol ]; then
  missing+=(slurm-client)
fi
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    sudo="sudo"
  fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# schemathesis (PyPI), pinned, in a virtual environment of its own: the API test runs it
# against a live controller (crates/gantry/tests/cli/schemathesis.rs).
bash "$(dirname "$0")/schemathesis/install.sh"
exit 0

