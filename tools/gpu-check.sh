#!/bin/bash
# gantry on a real NVIDIA GPU, as root, on a machine it may use for a minute: NVML discovery,
# MIG listing (read only: MIG mode, clocks and compute mode are never changed), a whole-GPU
# task and a GPU-less task through `serve --local` (the device cgroup must hide the GPU from
# the second), and two MPS shares on one GPU through a remote agent (one control daemon,
# CUDA work in each). Needs python3 with torch for the CUDA checks. Results: docs/on-a-real-gpu.md.
#
#   GANTRY=target/release/gantry bash tools/gpu-check.sh      # or a gzip'd binary in .devbin/
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; rm -rf /tmp/g1 /tmp/g2 /tmp/agentdata
G=${GANTRY:-/tmp/gantry}
if [ -z "${GANTRY:-}" ]; then gunzip -c .devbin/gantry.gz > $G && chmod +x $G; fi
H=$(hostname); INV=${INV:-}; PYBIN=$(command -v python3); MPSBIN=$(command -v nvidia-cuda-mps-control); echo "python3: $PYBIN mps: $MPSBIN"
step() { echo; echo "=== $*"; }
step nvidia-smi; nvidia-smi -L; nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,mig.mode.current,compute_mode,driver_version --format=csv; which nvidia-cuda-mps-control
nvidia-smi topo -m; nvidia-smi mig -lgip 2>&1 | head -30
step discover; $G discover; $G discover --json | head -30
step mig show; $G mig show
step cgroups; stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.controllers
# --- 1: serve --local on this machine's GPUs (MPS_ONLY=1 skips to part 2)
if [ -z "${MPS_ONLY:-}" ]; then
D=/tmp/g1; C1="--server http://127.0.0.1:8177 --data $D"
$G serve --local --insecure-http --listen 127.0.0.1:8177 --data $D > $OUT/serve1.log 2>&1 &
S1=$!; sleep 3
PY='import torch; print("torch sees", torch.cuda.device_count(), "GPU(s)"); print(torch.cuda.get_device_name(0) if torch.cuda.device_count() else "-")'
step whole GPU job
timeout 120 $G submit $C1 --gpus 1 --name whole --wait -- sh -c "echo CVD=\$CUDA_VISIBLE_DEVICES; nvidia-smi -L; $PYBIN -c '$PY'"
step GPU-less job
timeout 120 $G submit $C1 --name nogpu --wait -- sh -c "echo CVD=\$CUDA_VISIBLE_DEVICES; ls /dev/nvidia*; nvidia-smi -L; $PYBIN -c '$PY'; cat /proc/self/cgroup"
step metrics while a GPU job runs
$G submit $C1 --gpus 1 --name busy -- $PYBIN -c 'import torch, time; a = torch.randn(4096, 4096, device="cuda"); t = time.time()
while time.time() - t < 12: a = (a @ a).clamp(-1, 1)
torch.cuda.synchronize(); print("busy done")'
sleep 8; curl -s -H "Authorization: Bearer $(cat $D/admin.token)" http://127.0.0.1:8177/metrics | grep -iE "gpu|^# (TYPE|UNIT)" | grep -v "^# HELP" | head -60
sleep 8
step results; $G queue $C1 --all; $G show $C1 1; $G show $C1 2; $G show $C1 3
step logs 1; $G logs $C1 1; step logs 2; $G logs $C1 2
step nodes; $G nodes $C1
kill $S1; wait $S1
fi
# --- 2: MPS shares on a remote agent (the fleet file says the GPU is shared by MPS)
MODEL=$($G discover --json | $PYBIN -c 'import json, sys; print(json.load(sys.stdin)["gpus"][0]["model"])')
cat > /tmp/fleet.toml <<F
[[node]]
name = "$H"
cpu = 16
memory = "100GiB"
[node.gpus]
model = "$MODEL"
count = 1
mode = "mps"
max_clients = 4
F
cat > /tmp/mps.toml <<F
[[job]]
name = "mps"
count = 2
isolation = "soft"
gpu = { share = 250, memory = "5GiB", mode = "mps" }
command = 'echo CVD=\$CUDA_VISIBLE_DEVICES PIPE=\$CUDA_MPS_PIPE_DIRECTORY PCT=\$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE MEM=\$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; $PYBIN -c "import torch; x = torch.ones(1 << 20, device=\\"cuda\\"); print(\\"sum\\", x.sum().item()); import time; time.sleep(3)"; echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=\$CUDA_MPS_PIPE_DIRECTORY $MPSBIN'
F
D2=/tmp/g2; U2=http://127.0.0.1:8178
$G serve --insecure-http --fleet /tmp/fleet.toml --listen 127.0.0.1:8178 --data $D2 > $OUT/serve2.log 2>&1 &
S2=$!; sleep 3
ADMIN=$(cat $D2/admin.token)
$G token create agent-$H --role agent --node $H --server $U2 --token $ADMIN | head -1 > /tmp/agent.token
$G agent --server $U2 --token-file /tmp/agent.token --data /tmp/agentdata ${INV:+--inventory $INV} > $OUT/agent2.log 2>&1 &
A2=$!; sleep 4
step MPS jobs
timeout 150 $G submit /tmp/mps.toml --server $U2 --token $ADMIN --wait
step MPS results; $G queue --all --server $U2 --token $ADMIN; $G logs 1 --server $U2 --token $ADMIN; $G logs 2 --server $U2 --token $ADMIN
$G nodes --server $U2 --token $ADMIN
step daemons; ps -eo pid,user,args | grep -i [m]ps
kill $A2 $S2; wait
step agent log; tail -30 $OUT/agent2.log
step serve1 log; tail -20 $OUT/serve1.log
