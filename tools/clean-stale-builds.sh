#!/usr/bin/env bash
# Remove stale test and binary builds from target/debug/deps, keeping the newest of each name.
# Every dependency change leaves the previous `name-<hash>` executables behind (the `gantry`
# binary and its test binaries are some 350 MB each); on a small disk they fill it within a
# few days of work, after which nothing that writes a file works. Libraries (.rlib, .rmeta)
# are left alone: removing one still in use only costs a rebuild, but nothing is gained by it.
#
#   tools/clean-stale-builds.sh [TARGET_DIR]     # default: ./target
set -euo pipefail

deps="${1:-target}/debug/deps"
[ -d "$deps" ] || { echo "clean-stale-builds: no $deps" >&2; exit 1; }
before=$(du -sm "$deps" | cut -f1)
# Newest first; the first of each name (the part before -<16 hex>) is kept.
ls -t "$deps" | grep -vE '\.(d|rlib|rmeta|so|o)$' | sed -nE 's/^(.*)-([0-9a-f]{16})$/\1 &/p' |
    awk '{ if (seen[$1]++) print $2 }' | while read -r stale; do rm -f -- "$deps/$stale"; done
after=$(du -sm "$deps" | cut -f1)
echo "clean-stale-builds: $deps $before MB -> $after MB"
