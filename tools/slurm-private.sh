#!/usr/bin/env bash
# A private, throwaway Slurm on this machine, for comparing gantry's Slurm-compatible commands
# with the real ones (tools/slurm-compare/). Everything it writes lives under DIR: its own munge
# key and socket, slurm.conf and gres.conf, the controller's state, the nodes' spools, pid files
# and logs. Nothing under /etc is read or changed (clients find the cluster through SLURM_CONF,
# munge through AuthInfo=socket=…); no systemd; daemons run as root on loopback ports that were
# free when it started.
#
#   tools/slurm-private.sh start DIR   # write the config, start munged, slurmctld and two slurmds
#                                      # (nodes n1 and n2), wait until both are idle, then print
#                                      # the `export SLURM_CONF=…` line a caller must eval
#   tools/slurm-private.sh env DIR     # print that line again
#   tools/slurm-private.sh stop DIR    # stop every daemon it started (by pid file); safe to repeat
#
# The cluster: nodes n1 and n2 (one slurmd each, `slurmd -N`, a port each), 8 CPUs, 4000 MB and
# four fake GPUs (gpu:fake:4, on links to /dev/null under DIR/dev) each, whatever this machine
# really has (SlurmdParameters=config_overrides); partitions `debug` (default, 30 minutes) and
# `long` (1 day), both on n1 and n2. Finished jobs stay visible to `scontrol show job` for an hour
# (MinJobAge=3600) and are written to DIR/jobcomp.txt (JobCompType=jobcomp/filetxt): there is no
# slurmdbd, so `sacct` has nothing to read (it says "Slurm accounting storage is disabled").
#
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge: tools/install-test-deps.sh.
# SLURM_PRIVATE_NODES=1 starts one node (n1) instead of two.
set -euo pipefail

die() { echo "slurm-private: $*" >&2; exit 1; }
usage() { echo "usage: $0 start|stop|env DIR" >&2; exit 2; }

[ $# -eq 2 ] || usage
cmd=$1
if [ "$cmd" = start ]; then mkdir -p "$2" 2> /dev/null || die "cannot create $2"; fi
[ -d "$2" ] || die "no such directory: $2"
DIR=$(cd "$2" && pwd)
CONF=$DIR/slurm.conf
NODES=(n1 n2)
[ "${SLURM_PRIVATE_NODES:-2}" = 1 ] && NODES=(n1)

# pid files of everything started, in the order to stop them (nodes, controller, munge)
pidfiles() {
    local f
    for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
        [ -f "$f" ] && echo "$f"
    done
    return 0
}
kill_tree() { # kill_tree PID: SIGKILL a process and its descendants, children first
    local c
    kill -STOP "$1" 2> /dev/null || true
    for c in $(pgrep -P "$1" 2> /dev/null || true); do kill_tree "$c"; done
    kill -9 "$1" 2> /dev/null || true
}
alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2> /dev/null)" 2> /dev/null; }

stop() {
    local f pid pids=() names=() any=0 i
    # read the pid files first: munged removes its own when it exits
    for f in $(pidfiles); do
        pid=$(cat "$f" 2> /dev/null) || continue
        pids+=("$pid")
        names+=("$(basename "$f" .pid)")
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2> /dev/null; then
            kill "$pid" 2> /dev/null || true
            any=1
        fi
    done
    # give them up to 10 s, then SIGKILL what is left
    for _ in $(seq 20); do
        local left=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && left=1; done
        [ $left = 0 ] && break
        sleep 0.5
    done
    for i in "${!pids[@]}"; do
        if kill -0 "${pids[$i]}" 2> /dev/null; then
            echo "slurm-private: ${names[$i]} did not stop; killing it" >&2
            kill -9 "${pids[$i]}" 2> /dev/null || true
        fi
    done
    rm -f "$DIR"/run/*.pid
    # slurmstepd processes of jobs still running belong to no pid file; end those of this
    # Slurm (their environment has our SLURM_CONF) and the jobs' processes under them
    local p
    for p in $(pgrep -x slurmstepd 2> /dev/null || true); do
        if { tr '\0' '\n' < "/proc/$p/environ"; } 2> /dev/null | grep -qx "SLURM_CONF=$CONF"; then
            kill_tree "$p"
            any=1
        fi
    done
    [ $any = 1 ] && echo "slurm-private: stopped the Slurm in $DIR" >&2
    return 0
}

print_env() {
    [ -f "$CONF" ] || die "no Slurm was started in $DIR (no slurm.conf)"
    echo "export SLURM_CONF=$CONF"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() { # wait_for SECONDS WHAT COMMAND...
    local limit=$1 what=$2
    shift 2
    for _ in $(seq $((limit * 2))); do
        "$@" > /dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "slurm-private: $what did not come up in ${limit}s; last log lines:" >&2
    local log
    for log in "$DIR"/log/*; do
        [ -s "$log" ] && { echo "--- $log" >&2; tail -n 8 "$log" >&2; }
    done
    stop
    exit 1
}

write_conf() {
    local host=$1 ctld_port=$2
    shift 2
    local node_lines="" n i=0 ports=("$@")
    for n in "${NODES[@]}"; do
        node_lines+="NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[$i]} CPUs=8 RealMemory=4000 Gres=gpu:fake:4 State=UNKNOWN"$'\n'
        i=$((i + 1))
    done
    local nodelist
    nodelist=$(IFS=,; echo "${NODES[*]}")
    cat > "$CONF" << EOF
# A private Slurm written by tools/slurm-private.sh; everything it uses is under $DIR.
ClusterName=private
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/run/munge.sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
FirstJobId=4200000
MinJobAge=3600
KillWait=2
InactiveLimit=0
OverTimeLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60

$node_lines
PartitionName=debug Nodes=$nodelist Default=YES MaxTime=00:30:00 State=UP
PartitionName=long Nodes=$nodelist MaxTime=1-00:00:00 State=UP
EOF
    : > "$DIR/gres.conf"
    echo "AutoDetect=off" >> "$DIR/gres.conf"
    for n in "${NODES[@]}"; do
        mkdir -p "$DIR/dev/$n"
        for i in 0 1 2 3; do ln -sfn /dev/null "$DIR/dev/$n/nvidia$i"; done
        echo "NodeName=$n Name=gpu Type=fake File=$DIR/dev/$n/nvidia[0-3]" >> "$DIR/gres.conf"
    done
}

start() {
    [ "$(id -u)" = 0 ] || die "run as root (the daemons run as root)"
    local tool
    for tool in munged mungekey slurmctld slurmd sinfo scontrol python3; do
        command -v "$tool" > /dev/null || die "$tool is missing; run tools/install-test-deps.sh"
    done
    if alive "$DIR/run/slurmctld.pid"; then
        echo "slurm-private: already running in $DIR" >&2
        print_env
        return 0
    fi
    stop # leftovers of a run that died half-way
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/dev" "$DIR/jobcomp.txt"
    mkdir -p "$DIR/state" "$DIR/run" "$DIR/log"
    chmod 755 "$DIR" "$DIR/run"
    local n
    for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n"; done

    # munge: its own key and socket
    [ -f "$DIR/munge.key" ] || mungekey --create --keyfile="$DIR/munge.key" > /dev/null
    chmod 600 "$DIR/munge.key"
    setsid munged --force --socket="$DIR/run/munge.sock" --key-file="$DIR/munge.key" \
        --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/run/munge.seed" \
        --log-file="$DIR/log/munged.log" < /dev/null > "$DIR/log/munged.out" 2>&1
    wait_for 10 munged test -S "$DIR/run/munge.sock"

    local host ports=() ctld_port
    host=$(hostname -s)
    ctld_port=$(free_port)
    for n in "${NODES[@]}"; do ports+=("$(free_port)"); done
    write_conf "$host" "$ctld_port" "${ports[@]}"
    export SLURM_CONF=$CONF

    setsid slurmctld -D -i < /dev/null > "$DIR/log/slurmctld.out" 2>&1 &
    echo $! > "$DIR/run/slurmctld.pid"
    wait_for 30 slurmctld scontrol ping
    for n in "${NODES[@]}"; do
        setsid slurmd -D -N "$n" < /dev/null > "$DIR/log/slurmd-$n.out" 2>&1 &
        echo $! > "$DIR/run/slurmd-$n.pid"
    done
    wait_for 60 "the nodes (${NODES[*]})" \
        bash -c "[ \"\$(sinfo -h -N -p debug -t idle -o %N | sort -u | wc -l)\" = ${#NODES[@]} ]"
    echo "slurm-private: $(slurmctld -V) running in $DIR: nodes ${NODES[*]} idle, controller on 127.0.0.1:$ctld_port" >&2
    print_env
}

case $cmd in
    start) start ;;
    stop) stop ;;
    env) print_env ;;
    *) usage ;;
esac
