#!/bin/bash
# Submitted three times by the harness: J1 exits 1 (COMPARE_EXIT=1), J2 with
# --dependency=afternotok:J1 runs, J3 with --dependency=afterok:J1 can never run: the harness
# records its state and reason, then cancels it.
#SBATCH --output=%x-%j.out
#SBATCH --job-name=afternotok
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
exit "${COMPARE_EXIT:-0}"
