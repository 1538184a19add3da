#!/bin/bash
# Checks: an array of four tasks, at most two at once; %A/%a in --output; SLURM_ARRAY_*.
#SBATCH --job-name=arr
#SBATCH --array=0-3%2
#SBATCH --output=%x-%A_%a.out
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
