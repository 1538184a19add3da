#!/bin/bash
# Checks: --ntasks=4 --gpus-per-task=1; which GPUs the batch step and each srun task see.
#SBATCH --ntasks=4
#SBATCH --gpus-per-task=1
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
export -f dump
srun --label bash -c 'dump "step $SLURM_STEP_ID"' | LC_ALL=C sort
