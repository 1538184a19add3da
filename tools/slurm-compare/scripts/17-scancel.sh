#!/bin/bash
# Checks: scancel of a running job (the harness waits until it is RUNNING and its output
# has the dump, then cancels it): state CANCELLED and what lands in the output.
#SBATCH --output=%x-%j.out
#SBATCH --job-name=cancelme
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
sleep 60
echo "not cancelled"
