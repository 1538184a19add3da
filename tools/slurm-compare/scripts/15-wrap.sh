# Not a batch script: the harness passes the last line of this file to `sbatch --wrap`.
# Checks: --wrap (Slurm runs it under /bin/sh), the job name "wrap".
echo "== batch"; env | grep -E '^(SLURM[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|USER|LOGNAME|PWD|COMPARE_[A-Z0-9_]*)=' | LC_ALL=C sort; echo "script=$(basename "$0")"
