#!/bin/bash
# Checks: --ntasks=2 --gres=gpu:2; the batch step runs once, then one srun step runs
# both tasks (SLURM_PROCID/SLURM_LOCALID/CUDA_VISIBLE_DEVICES per task, labelled and sorted).
#SBATCH --ntasks=2
#SBATCH --gres=gpu:2
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
export -f dump
srun --label bash -c 'dump "step $SLURM_STEP_ID"' | LC_ALL=C sort
