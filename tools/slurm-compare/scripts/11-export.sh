#!/bin/bash
# Submitted twice: --export=ALL,FOO=bar, then --export=NONE. The harness exports
# COMPARE_FROM_SUBMITTER=yes before sbatch. Checks which variables reach the job.
#SBATCH --output=%x-%j.out
# dump LABEL: the variables a reimplementation must match, sorted KEY=VALUE (tools/slurm-compare)
dump() {
  echo "== ${1:-batch}"
  env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|USER|LOGNAME|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort
}
dump batch
echo "FOO=${FOO-<unset>}"
echo "HOME=${HOME-<unset>}"
if [ -n "${PATH+x}" ]; then echo "PATH is set"; else echo "PATH is unset"; fi
