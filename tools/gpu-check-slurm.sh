#!/bin/bash
# gantry's Slurm batch semantics on a real NVIDIA GPU, as root, for a minute: `serve --local`
# on this machine's GPUs (NVML), `sbatch` with two tasks sharing one GPU, the script run once,
# `srun` steps whose tasks see the job's GPU through the device cgroup and stay in the job's
# cgroup, CUDA in each task (python3 with torch), then `sacct` and `scontrol show job`.
# Never changes MIG mode, clocks or compute mode. Results: docs/on-a-real-gpu.md.
#
#   GANTRY=target/release/gantry bash tools/gpu-check-slurm.sh   # or a gzip'd binary in .devbin/
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; rm -rf /tmp/gs /tmp/gsbin /tmp/gsjob
G=${GANTRY:-/tmp/gantry}
if [ -z "${GANTRY:-}" ]; then gunzip -c .devbin/gantry.gz > $G && chmod +x $G; fi
step() { echo; echo "=== $*"; }
PYBIN=$(command -v python3)
$G slurm-install --prefix /tmp/gsbin > /dev/null
export PATH=/tmp/gsbin:$PATH GANTRY_SERVER=http://127.0.0.1:8179 GANTRY_DATA=/tmp/gs
$G serve --local --insecure-http --listen 127.0.0.1:8179 --data /tmp/gs > $OUT/serve-slurm.log 2>&1 &
S=$!; sleep 3
mkdir -p /tmp/gsjob && cd /tmp/gsjob
cat > job.sh <<S
#!/bin/bash
#SBATCH --ntasks=2 --gres=gpu:1 -J steps
echo "batch on \$SLURMD_NODENAME: CVD=\$CUDA_VISIBLE_DEVICES ntasks=\$SLURM_NTASKS"
nvidia-smi -L
grep -E '^0::|devices' /proc/self/cgroup
srun -l bash -c 'echo "rank \$SLURM_PROCID/\$SLURM_NTASKS CVD=\$CUDA_VISIBLE_DEVICES"; nvidia-smi -L; grep -E "^0::|devices" /proc/self/cgroup'
srun -l $PYBIN -c 'import os, torch; x = torch.ones(1 << 20, device="cuda"); print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], "sum", x.sum().item(), torch.cuda.get_device_name(0))'
S
step sbatch; timeout 150 sbatch --wait job.sh; echo "sbatch exit $?"
step output; cat slurm-*.out
step sacct; sacct -j 1 --format=JobID,JobName,State,ExitCode,AllocCPUS,AllocTRES,NodeList
step scontrol; scontrol show job 1; sinfo -N -l
kill $S; wait $S
step serve log; tail -15 $OUT/serve-slurm.log
