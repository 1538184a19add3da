#!/bin/bash
# Submitted twice by the harness: J1, then J2 with --dependency=afterok:J1.
# Checks: J2 starts after J1 succeeded; what a dependent job sees (SLURM_JOB_DEPENDENCY?).
#SBATCH --output=%x-%j.out
#SBATCH --job-name=afterok
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
sleep 1
