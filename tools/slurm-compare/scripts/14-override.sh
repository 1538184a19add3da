#!/bin/bash
# Checks: #SBATCH lines overridden on the command line (the harness passes
# --job-name=from-cli); the partition and output pattern from the script still apply.
#SBATCH --job-name=from-script
#SBATCH --partition=long
#SBATCH --output=%x.out
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
