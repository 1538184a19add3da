#!/usr/bin/env bash
# Records the Slurm fixtures gantry's importers are tested against, from a real Slurm.
#
# It starts, on this machine and inside one temporary directory, a throwaway MariaDB, munged,
# slurmdbd, slurmctld and one slurmd per node of a small GPU cluster (GPUs declared in
# gres.conf on stand-in device files, node sizes taken from slurm.conf through
# `SlurmdParameters=config_overrides`, so no GPU is needed), submits a scripted workload as
# three research users (whole-GPU jobs, a two-node gang, an array, MIG-typed jobs, a
# heterogeneous job, a failing job, a job past its time limit, one cancelled while running and
# one cancelled while pending), waits for it to drain, and writes into OUT:
#
#   slurm.conf, gres.conf   the configuration the daemons ran with (ports and paths of this run
#                           replaced by stable placeholders)
#   sacct.txt               sacct --parsable2 --allocations with the documented field list
#   sacct-steps.txt         the same without --allocations (steps included), for the importer's
#                           step counting
#   README.md               how and when they were made, and by which Slurm
#
# Needs root and Debian's packages: slurmctld slurmd slurmdbd slurm-client munge
# mariadb-server (`apt-get install …`); the users ada, bob and cy are created when missing and
# removed afterwards. Nothing outside the temporary directory is changed, and every daemon is
# stopped on exit, failed or not. Takes about three minutes.
#
#   bash tools/record-slurm-fixtures.sh [OUT]      # OUT defaults to the committed fixtures
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/crates/gantry-spec/fixtures/slurm/recorded}
USERS=(ada bob cy)
export TZ=UTC

[ "$(id -u)" = 0 ] || { echo "record-slurm-fixtures: run as root (daemons and users)" >&2; exit 2; }
for tool in slurmctld slurmd slurmdbd sbatch sacct sacctmgr munged mungekey mariadbd mariadb-install-db python3; do
    command -v "$tool" > /dev/null || {
        echo "record-slurm-fixtures: $tool is missing; apt-get install slurmctld slurmd slurmdbd slurm-client munge mariadb-server" >&2
        exit 2
    }
done

WORK=$(mktemp -d /tmp/gantry-slurm.XXXXXX)
chmod 755 "$WORK" # the users submit through its munge socket and run from its spool
CREATED_USERS=()
PIDS=()
cleanup() {
    set +e
    for pid in "${PIDS[@]}"; do kill "$pid" 2> /dev/null; done
    sleep 1
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2> /dev/null; done
    for user in "${CREATED_USERS[@]}"; do userdel "$user" 2> /dev/null; done
    if [ -n "${KEEP_WORK:-}" ]; then echo "record-slurm-fixtures: work kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS WHAT COMMAND…
    local limit=$1 what=$2
    shift 2
    for _ in $(seq "$limit"); do "$@" > /dev/null 2>&1 && return 0; sleep 1; done
    echo "record-slurm-fixtures: $what did not come up; logs in $WORK (KEEP_WORK=1 keeps them)" >&2
    for log in "$WORK"/*.log "$WORK"/*.out; do [ -f "$log" ] && tail -n 5 "$log" >&2; done || true
    exit 1
}

DB_PORT=$(free_port)
DBD_PORT=$(free_port)
CTLD_PORT=$(free_port)
HOST=$(hostname)
NODES=(gpu01 gpu02 h100-1 mig01 cpu01)
mkdir -p "$WORK/state" "$WORK/db"
for node in "${NODES[@]}"; do mkdir -p "$WORK/spool/$node"; done

start_mariadb() {
    mariadb-install-db --no-defaults --datadir="$WORK/db" --user=root --skip-test-db > "$WORK/mariadb-install.log" 2>&1
    mariadbd --no-defaults --datadir="$WORK/db" --socket="$WORK/db.sock" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --user=root --pid-file="$WORK/db.pid" > "$WORK/mariadb.log" 2>&1 &
    PIDS+=($!)
    wait_for 30 MariaDB mariadb --no-defaults --socket="$WORK/db.sock" -e 'select 1'
    mariadb --no-defaults --socket="$WORK/db.sock" -e \
        "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'recorded'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_munge() {
    mungekey --create --keyfile="$WORK/munge.key" > /dev/null
    chmod 600 "$WORK/munge.key"
    munged --force --socket="$WORK/munge.sock" --key-file="$WORK/munge.key" --pid-file="$WORK/munged.pid" \
        --seed-file="$WORK/munge.seed" --log-file="$WORK/munged.log" --foreground &
    PIDS+=($!)
    wait_for 10 munged test -S "$WORK/munge.sock"
}

# One NodeName line; the host and port are this run's (several slurmds on one host need a port each).
node() { echo "NodeName=$1 ${*:2} NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$(free_port)"; }

write_conf() {
    cat > "$WORK/slurm.conf" << EOF
# A small GPU cluster, recorded by tools/record-slurm-fixtures.sh.
ClusterName=recorded
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge.sock
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd-%n.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
PriorityType=priority/multifactor
PriorityWeightFairshare=1000
PriorityWeightAge=100
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$WORK/munge.sock
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100,gres/gpu:1g.10gb,gres/gpu:3g.40gb
JobCompType=jobcomp/none
MinJobAge=600
KillWait=2
InactiveLimit=0
OverTimeLimit=0

NodeName=DEFAULT State=UNKNOWN
$(node gpu01 CPUs=16 RealMemory=128000 Gres=gpu:a100:4 Features=a100,ib)
$(node gpu02 CPUs=16 RealMemory=128000 Gres=gpu:a100:4 Features=a100,ib)
$(node h100-1 CPUs=32 RealMemory=256000 Gres=gpu:h100:8 Features=h100,ib Weight=10)
$(node mig01 CPUs=16 RealMemory=128000 Gres=gpu:1g.10gb:7,gpu:3g.40gb:2 Features=A100-SXM4-80GB)
$(node cpu01 CPUs=8 RealMemory=32000)

PartitionName=gpu Nodes=gpu[01-02],h100-1,mig01 Default=YES MaxTime=04:00:00 State=UP
PartitionName=debug Nodes=cpu01 MaxTime=00:30:00 PriorityJobFactor=10 State=UP
EOF
    # Slurm wants a device file per GPU; links to /dev/null stand in (the recorded copy names
    # them /dev/nvidia0… and /dev/nvidia-caps/nvidia-cap…, as on a real node).
    mkdir -p "$WORK/dev/nvidia-caps"
    for i in $(seq 0 7); do ln -s /dev/null "$WORK/dev/nvidia$i"; done
    for i in $(seq 1 9); do ln -s /dev/null "$WORK/dev/nvidia-caps/nvidia-cap$i"; done
    cat > "$WORK/gres.conf" << EOF
AutoDetect=off
NodeName=gpu[01-02] Name=gpu Type=a100 File=$WORK/dev/nvidia[0-3]
NodeName=h100-1 Name=gpu Type=h100 File=$WORK/dev/nvidia[0-7]
NodeName=mig01 Name=gpu Type=1g.10gb File=$WORK/dev/nvidia-caps/nvidia-cap[1-7]
NodeName=mig01 Name=gpu Type=3g.40gb File=$WORK/dev/nvidia-caps/nvidia-cap[8-9]
EOF
    cat > "$WORK/slurmdbd.conf" << EOF
AuthType=auth/munge
AuthInfo=socket=$WORK/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=recorded
StorageLoc=slurm_acct_db
PidFile=$WORK/slurmdbd.pid
LogFile=$WORK/slurmdbd.log
EOF
    chmod 600 "$WORK/slurmdbd.conf"
    export SLURM_CONF=$WORK/slurm.conf
}

start_slurm() {
    slurmdbd -D > "$WORK/slurmdbd.out" 2>&1 &
    PIDS+=($!)
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i add cluster recorded > /dev/null
    for account in vision infer research; do sacctmgr -i add account "$account" > /dev/null; done
    sacctmgr -i add user ada account=vision > /dev/null
    sacctmgr -i add user bob account=infer > /dev/null
    sacctmgr -i add user cy account=research,vision > /dev/null
    sacctmgr -i add user root account=research > /dev/null
    slurmctld -D -i > "$WORK/slurmctld.out" 2>&1 &
    PIDS+=($!)
    wait_for 30 slurmctld scontrol ping
    for node in "${NODES[@]}"; do
        slurmd -D -N "$node" > "$WORK/slurmd-$node.out" 2>&1 &
        PIDS+=($!)
    done
    wait_for 60 "the nodes" bash -c '[ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" = 5 ]'
}

add_users() {
    for user in "${USERS[@]}"; do
        if ! id "$user" > /dev/null 2>&1; then
            useradd --no-create-home --shell /bin/sh "$user"
            CREATED_USERS+=("$user")
        fi
    done
}

as() { local user=$1; shift; setpriv --reuid="$user" --regid="$user" --init-groups env SLURM_CONF="$SLURM_CONF" "$@"; }
job() { as "$1" sbatch --parsable --chdir=/tmp --output=/dev/null "${@:2}"; }

submit_workload() {
    # Training: a two-node gang of 8 A100s, then whole-GPU jobs that queue behind it.
    job ada -A vision -p gpu -J train-gang -N 2 --ntasks-per-node=1 -c 8 --mem=64G --gres=gpu:a100:4 -t 00:10:00 --wrap='sleep 30'
    job cy -A research -p gpu -J pretrain -N 1 -c 16 --mem=128G --gres=gpu:h100:8 -t 00:20:00 --wrap='sleep 40'
    job ada -A vision -p gpu -J sweep -a 0-5 -c 2 --mem=16G --gres=gpu:a100:1 -t 00:05:00 --wrap='sleep $((10 + SLURM_ARRAY_TASK_ID * 3))'
    # Inference: MIG-typed jobs on mig01, more than its seven 1g.10gb slices.
    for i in $(seq 1 9); do
        job bob -A infer -p gpu -J "embed-$i" -c 1 --mem=8G --gres=gpu:1g.10gb:1 -t 00:05:00 --wrap="sleep $((8 + i * 2))"
    done
    job bob -A infer -p gpu -J rerank -c 4 --mem=32G --gres=gpu:3g.40gb:1 -t 00:05:00 --wrap='sleep 25'
    # A heterogeneous job: a CPU coordinator beside a GPU worker.
    job cy -A research -J hetero -p debug -c 2 --mem=4G -t 00:05:00 : -p gpu -c 4 --mem=32G --gres=gpu:a100:2 -t 00:05:00 --wrap='sleep 15'
    # CPU-only work on the debug partition.
    job cy -A research -p debug -J preprocess -c 4 --mem=8G -t 00:05:00 --wrap='sleep 12'
    # Faults: a failing job, a job past its one-minute limit, one cancelled while running and one
    # cancelled while it waited for the H100s the pretraining job holds.
    job ada -A vision -p gpu -J broken -c 2 --mem=8G --gres=gpu:a100:1 -t 00:05:00 --wrap='sleep 3; exit 3'
    job cy -A research -p gpu -J overrun -c 2 --mem=8G --gres=gpu:h100:1 -t 00:01:00 --wrap='sleep 300'
    local running pending
    running=$(job cy -A vision -p debug -J abandoned -c 2 --mem=4G -t 00:05:00 --wrap='sleep 300')
    pending=$(job bob -A infer -p gpu -J too-late -c 16 --mem=64G --gres=gpu:h100:8 -t 00:05:00 --wrap='sleep 5')
    for _ in $(seq 60); do [ "$(squeue -h -j "$running" -o %T)" = RUNNING ] && break; sleep 1; done
    sleep 5
    scancel "$running" "$pending"
}

drain() {
    for _ in $(seq 300); do
        [ -z "$(squeue -h -o %i)" ] && return 0
        sleep 2
    done
    echo "record-slurm-fixtures: the workload did not drain in ten minutes" >&2
    squeue >&2
    exit 1
}

record() {
    local fields=JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,ReqTRES,AllocTRES,NNodes,Priority,QOS,ExitCode
    # slurmdbd takes the last records a moment after the jobs end.
    sleep 5
    mkdir -p "$OUT"
    sacct --parsable2 --allocations --allusers --starttime=now-1hour --format="$fields" > "$OUT/sacct.txt"
    sacct --parsable2 --allusers --starttime=now-1hour --format="$fields" > "$OUT/sacct-steps.txt"
    # The conf files without this run's ports, paths and host.
    local placeholders=(-e "s|$WORK/dev|/dev|g" -e "s|$WORK|/var/lib/slurm-recorded|g" -e "s|$HOST|head|g")
    for port in $DB_PORT $DBD_PORT $CTLD_PORT; do placeholders+=(-e "s|=$port\$|=PORT|"); done
    sed "${placeholders[@]}" -e 's/ NodeHostname=head NodeAddr=127.0.0.1 Port=[0-9]*$//' "$WORK/slurm.conf" > "$OUT/slurm.conf"
    sed "${placeholders[@]}" "$WORK/gres.conf" > "$OUT/gres.conf"
    cat > "$OUT/README.md" << EOF
# Recorded from a running Slurm

Made by \`tools/record-slurm-fixtures.sh\` on $(date -u +%Y-%m-%d) with $(slurmctld -V), Debian's
packages, on one machine: slurmctld, slurmdbd (MariaDB $(mariadbd --version | grep -o '[0-9]*\.[0-9]*\.[0-9]*' | head -1)) and one slurmd per
node, GPUs declared in \`gres.conf\` on links to /dev/null. Re-run it (as root) to record them
again; the workload it submits is in the script.

- \`slurm.conf\`, \`gres.conf\`: the cluster as the daemons read it (this run's ports, paths and
  host name replaced by placeholders; the per-node \`Port=\` only multiple slurmds on one host need
  is dropped).
- \`sacct.txt\`: \`sacct --parsable2 --allocations --allusers --format=$fields\`.
- \`sacct-steps.txt\`: the same without \`--allocations\` (batch, extern and het steps included).
EOF
    echo "record-slurm-fixtures: wrote $(($(wc -l < "$OUT/sacct.txt") - 1)) allocations to $OUT" >&2
}

start_mariadb
start_munge
write_conf
add_users # before slurmctld, which maps the accounting's user names to uids when it starts
start_slurm
submit_workload
drain
record
