#!/usr/bin/env bash
# Installs what tools/slurm-private.sh needs to run a private Slurm on this machine: Debian's
# slurmctld, slurmd, slurm-client (sbatch, squeue, scontrol, sacct, ...) and munge.
# Installs only what is missing; does nothing when all are there.
set -euo pipefail
missing=()
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ] || missing+=(slurmd)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
{ command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ]; } && command -v mungekey >/dev/null 2>&1 || missing+=(munge)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
