#!/usr/bin/env bash
# schemathesis and openapi-spec-validator from PyPI, pinned, in a virtual environment of their
# own (nothing installed into the system's Python). Idempotent: an environment that already
# answers is kept.
#
#   tools/schemathesis/install.sh        # then: "$(tools/schemathesis/install.sh --path)"/bin/schemathesis
set -euo pipefail
version=4.32.5
validator=0.9.0
venv=${GANTRY_SCHEMATHESIS_VENV:-${HOME:-/root}/.cache/gantry/schemathesis-$version-$validator}
if [ "${1:-}" = --path ]; then
  echo "$venv"
  exit 0
fi
if "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version" && [ -x "$venv/bin/openapi-spec-validator" ]; then
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "schemathesis==$version" "openapi-spec-validator==$validator"
"$venv/bin/schemathesis" --version
