#!/bin/bash
# Checks: a job killed at its time limit (--time=1, one minute, the least Slurm has), on the
# second partition. Slurm kills it 60-90 s after it starts; it would otherwise sleep 200 s.
#SBATCH --time=1
#SBATCH --partition=long
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
echo "sleeping"
sleep 200
echo "not killed"
