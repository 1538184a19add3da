#!/usr/bin/env bash
# Regenerate the dashboard screenshots in docs/ (docs/dashboard-*.png): a local controller on
# the demo fleet runs the demo jobs plus a few long ones for a while, so the charts have
# points, then headless Chromium photographs each page.
# Needs chromium (tools/install-test-deps.sh installs it), python3 and a built gantry (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
GANTRY=${GANTRY:-target/release/gantry}
SECONDS_TO_RUN=${SECONDS_TO_RUN:-90}
port=18399
data=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$data"' EXIT
"$GANTRY" serve --local --demo --insecure-http --data "$data" --listen 127.0.0.1:$port 2>"$data/serve.log" &
pid=$!
# --demo submits its workload once the controller is up, and only into an empty store: wait
# for it, so that the long jobs below come after the demo's (and do not stop it).
for _ in $(seq 1 600); do grep -q "demo: submitted" "$data/serve.log" 2>/dev/null && break; sleep 0.1; done
grep -q "demo: submitted" "$data/serve.log" || { echo "the demo workload was not submitted" >&2; exit 1; }
token=$(cat "$data/admin.token")
export GANTRY_SERVER=http://127.0.0.1:$port GANTRY_TOKEN=$token
cat > "$data/long.toml" <<'TOML'
[[job]]
name = "train-long"
queue = "research"
user = "ada"
gpu = { count = 4 }
model = "H100*"
command = "sleep 600"

[[job]]
name = "serve-llm"
queue = "prod"
user = "ben"
gpu = { mig = "3g.40gb" }
command = "sleep 600"

[[job]]
name = "notebook"
count = 3
queue = "dev"
user = "cy"
gpu = { share = 125, memory = "8GiB", mode = "time-slice" }
command = "sleep 600"

[[job]]
name = "embed-svc"
count = 2
queue = "prod"
user = "ben"
gpu = { share = 250, memory = "5GiB", mode = "mps" }
command = "sleep 600"
TOML
"$GANTRY" submit "$data/long.toml" >/dev/null
echo "running for ${SECONDS_TO_RUN}s so the charts have points..."
sleep "$SECONDS_TO_RUN"
# A browser logs in through the form (tools/browse.py) and photographs each page.
BROWSE_PROFILE="$data/profile" python3 tools/browse.py --url "http://127.0.0.1:$port" --token-file "$data/admin.token" \
  --out "$data/shots" /ui/fleet /ui/queue /ui/usage /ui/jobs/23
for page in fleet queue usage jobs-23; do
  cp "$data/shots/ui-$page.png" "docs/dashboard-$page.png"
  echo "docs/dashboard-$page.png"
done
