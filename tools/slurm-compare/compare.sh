#!/usr/bin/env bash
# Compare two result folders of run.sh (the reference from a real Slurm, and another run) after
# the rules in differences.txt: prints a unified diff of what still differs and exits 1 if
# anything does, 0 if they agree. Only the scripts in the second folder are compared.
#
#   tools/slurm-compare/compare.sh tools/slurm-compare/expected /tmp/compare-out
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REFERENCE_DIR OTHER_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
drops=()
edits=()
while IFS= read -r line; do
  case $line in
    drop\ *) drops+=(-e "${line#drop }") ;;
    edit\ *) edits+=(-e "${line#edit }") ;;
    ''|\#*) ;;
    *) echo "compare: differences.txt: not a rule: $line" >&2; exit 2 ;;
  esac
done < "$here/differences.txt"
# The rules applied to one file: edits, then drops (a file with no drops keeps every line).
apply() {
  local out
  out=$(sed -E "${edits[@]:-}" "$1")
  if [ ${#drops[@]} -gt 0 ]; then out=$(grep -Ev "${drops[@]}" <<< "$out" || true); fi
  printf '%s\n' "$out"
}
status=0
found=0
for other in "$2"/*.txt; do
  [ -e "$other" ] || continue
  found=1
  name=$(basename "$other")
  reference="$1/$name"
  if [ ! -e "$reference" ]; then
    echo "compare: $name: no reference" >&2
    status=1
    continue
  fi
  if ! diff -u --label "reference/$name" --label "other/$name" <(apply "$reference") <(apply "$other"); then
    status=1
  fi
done
[ $found = 1 ] || { echo "compare: no results in $2" >&2; exit 2; }
exit $status
