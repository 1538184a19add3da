#!/usr/bin/env bash
# Runs the batch scripts in scripts/ under whatever sbatch, squeue, scancel and scontrol come
# first on PATH (a real Slurm: tools/slurm-private.sh; or gantry's Slurm-compatible commands),
# waits for them, and writes one normalized file per script into OUT:
#
#   tools/slurm-compare/run.sh OUT [NN-name ...]     # all scripts when none is named
#   diff -ru tools/slurm-compare/expected OUT        # compare with the recorded real Slurm
#
# Each file holds the sbatch command lines, the names and contents of the files the jobs wrote,
# and each job's final state and exit code (sacct --parsable2 when it works, else
# `scontrol show job`), with job ids, node names, the host name, ports, pids, times and this
# run's paths replaced by placeholders (normalize(), below). The scripts run one after another
# (so placement is the same each time), except 10-timelimit, which runs beside them.
# COMPARE_WORK=DIR keeps the jobs' directories there (default: a temporary directory, removed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 OUT [NN-name ...]" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
shift
for tool in sbatch squeue scancel scontrol; do
    command -v "$tool" > /dev/null || { echo "run.sh: $tool is not on PATH" >&2; exit 2; }
done
if [ -n "${COMPARE_WORK:-}" ]; then
    mkdir -p "$COMPARE_WORK"
    WORK=$(cd "$COMPARE_WORK" && pwd)
    unset COMPARE_WORK # not for the jobs
else
    WORK=$(mktemp -d /tmp/slurm-compare.XXXXXX)
    trap 'rm -rf "$WORK"' EXIT
fi
HOST=$(hostname)
HOST_S=$(hostname -s)
export COMPARE_FROM_SUBMITTER=yes # shows whether the submitter's environment reaches the job
# A login shell's USER and LOGNAME, so what the jobs see does not depend on how run.sh was started.
USER=$(id -un) LOGNAME=$(id -un)
export USER LOGNAME

# ---------------------------------------------------------------- normalization (one place)
# The node names, in order: n1 -> <NODE1>, n2 -> <NODE2>; COMPARE_NODES overrides what sinfo says.
NODES=(${COMPARE_NODES:-$( (sinfo -h -N -o %N 2> /dev/null || true) | sort -u)})

# normalize MAPFILE < raw > normalized. MAPFILE has "ID PLACEHOLDER" lines (this script's job
# ids). Rules, in order: job ids -> <J1>/<A>/<A_k>; variables whose values are a pid, a port, an
# address, a time or the config path -> <PID>/<PORT>/<ADDR>/<EPOCH>/<SLURM_CONF>; ISO times ->
# <TIME>; the work dir -> <WORK>; node names -> <NODEi> (their compressed list -> <NODE1-n>); the
# host name -> <HOST>. A number or name is replaced only where no digit/letter touches it.
normalize() {
    local all=""
    if [ ${#NODES[@]} -gt 1 ]; then
        all=$(scontrol show hostlist "$(IFS=,; echo "${NODES[*]}")" 2> /dev/null || true)
    fi
    MAPFILE=$1 WORKDIR=$WORK HOSTS="$HOST $HOST_S" NODELIST="${NODES[*]}" ALLNODES=$all perl -pe '
        BEGIN {
            open(my $m, "<", $ENV{MAPFILE}) or die;
            while (<$m>) { my ($id, $ph) = split; push @ids, [$id, $ph] if defined $ph }
            @nodes = split " ", $ENV{NODELIST};
            @hosts = grep { length } split " ", $ENV{HOSTS};
        }
        for my $p (@ids) { my ($id, $ph) = @$p; s/(?<![0-9])\Q$id\E(?![0-9])/$ph/g }
        s/^((?:\d+: )?SLURM_(?:TASK_PID|PRIO_PROCESS))=.*/$1=<PID>/;
        s/^((?:\d+: )?SLURM_(?:SRUN_COMM_PORT|STEP_LAUNCHER_PORT|STEP_RESV_PORTS))=.*/$1=<PORT>/;
        s/^((?:\d+: )?SLURM_(?:SRUN_COMM_HOST|LAUNCH_NODE_IPADDR))=.*/$1=<ADDR>/;
        s/^((?:\d+: )?SLURM_JOB_(?:START|END)_TIME)=.*/$1=<EPOCH>/;
        s/^((?:\d+: )?SLURM_CONF)=.*/$1=<SLURM_CONF>/;
        s/^((?:\d+: )?SLURM_WORKING_CLUSTER)=([^:]*):.*/$1=$2:<ADDR>:<PORT>:<PROTO>/;
        s/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/<TIME>/g;
        s/\Q$ENV{WORKDIR}\E/<WORK>/g;
        s/(?<![A-Za-z0-9_])\Q$ENV{ALLNODES}\E(?![A-Za-z0-9_])/<NODE1-${\ scalar @nodes}>/g if length $ENV{ALLNODES};
        for my $i (0 .. $#nodes) { my $n = $nodes[$i]; my $k = $i + 1; s/(?<![A-Za-z0-9_])\Q$n\E(?![A-Za-z0-9_])/<NODE$k>/g }
        for my $h (@hosts) { s/(?<![\w.-])\Q$h\E(?![\w-])/<HOST>/g }
    '
}

# ---------------------------------------------------------------- submitting and waiting
# Per script: $D its work dir, $S its path, $R the raw result, $IDS "ID PLACEHOLDER" lines.
sub() { # sub [SBATCH ARGS...] -- sbatch --parsable ARGS SCRIPT; echoes the id, records it
    local out id n
    out=$(cd "$D" && sbatch --parsable "$@" "$S" "${SCRIPT_ARGS[@]}" 2>&1) || {
        echo "sbatch failed: $out" >> "$R"
        echo FAILED
        return 0
    }
    id=${out%%;*}
    n=$(($(wc -l < "$IDS") + 1))
    echo "$id <J$n>" >> "$IDS"
    echo "$id: sbatch --parsable${*:+ $*} $(basename "$S")${SCRIPT_ARGS[*]:+ ${SCRIPT_ARGS[*]@Q}}" >> "$R.subs"
    echo "$id"
}

gone() { [ -z "$(squeue -h -j "$1" 2> /dev/null)" ]; }

wait_gone() { # wait_gone SECONDS ID...
    local limit=$1 id
    shift
    for _ in $(seq $((limit * 4))); do
        local left=0
        for id in "$@"; do gone "$id" || left=1; done
        [ $left = 0 ] && return 0
        sleep 0.25
    done
    echo "timeout: still queued after ${limit}s: $*" >> "$R"
    scancel "$@" 2> /dev/null || true
}

squeue_state() { squeue -h -j "$1" -o '%T %r' 2> /dev/null || echo "squeue failed"; }

wait_state() { # wait_state SECONDS ID STATE-REGEX
    for _ in $(seq $(($1 * 4))); do
        squeue_state "$2" | grep -qE "$3" && return 0
        sleep 0.25
    done
    return 1
}

# The jobs' final states, a fixed set of fields in a fixed order: from `scontrol show job -o`
# (COMPARE_STATE=scontrol), or `sacct --parsable2` (COMPARE_STATE=sacct); by default scontrol
# when it knows the first job, else sacct. (The reference is scontrol's: without slurmdbd the
# real sacct says "Slurm accounting storage is disabled".)
job_states() { # job_states ID...
    local id how=${COMPARE_STATE:-}
    if [ -z "$how" ]; then
        how=sacct
        # A loaded slurmctld can time out one request: ask a few times before deciding.
        for _ in 1 2 3 4 5; do
            if scontrol show job -o "$1" 2> /dev/null | grep -q '^JobId='; then how=scontrol; break; fi
            sleep 1
        done
    fi
    if [ "$how" = sacct ]; then
        echo "(sacct)"
        for id in "$@"; do
            sacct --parsable2 --noheader -j "$id" \
                -o JobID,JobName,Partition,State,ExitCode,DerivedExitCode,NNodes,NCPUS,Timelimit,ReqTRES 2>&1 || true
        done
        return
    fi
    echo "(scontrol show job)"
    local fields='JobId ArrayJobId ArrayTaskId JobName Partition JobState Reason Dependency ExitCode DerivedExitCode TimeLimit NumNodes NumCPUs NumTasks CPUs/Task TresPerNode TresPerTask MinMemoryNode MinMemoryCPU StdOut StdErr WorkDir'
    for id in "$@"; do
        scontrol show job -o "$id" 2>&1 | awk -v fields="$fields" '
            { n = split(fields, want, " "); delete v
              for (i = 1; i <= NF; i++) { p = index($i, "="); if (p) v[substr($i, 1, p - 1)] = substr($i, p + 1) }
              line = ""
              for (i = 1; i <= n; i++) if (want[i] in v) line = line (line == "" ? "" : " ") want[i] "=" v[want[i]]
              print (line == "" ? $0 : line) }' | sort -t= -k4,4n
    done
}

# Array tasks: their own job ids -> <A_k> (from scontrol, and from what the tasks printed),
# the array's id -> <A>.
map_array() { # map_array ARRAYID
    local a=$1
    sed -i "s/^$a <J[0-9]*>$/$a <A>/" "$IDS"
    {
        scontrol show job -o "$a" 2> /dev/null | grep -o 'JobId=[0-9]* ArrayJobId=[0-9]* ArrayTaskId=[0-9]*' |
            sed 's/JobId=\([0-9]*\) ArrayJobId=\([0-9]*\) ArrayTaskId=\([0-9]*\)/\1 \2 \3/' || true
        for f in $(find "$D" -type f); do
            awk -F= '/^SLURM_JOB_ID=/ && !j { j = $2 } /^SLURM_ARRAY_JOB_ID=/ && !a { a = $2 }
                     /^SLURM_ARRAY_TASK_ID=/ && !t { t = $2 } END { if (j != "" && a != "") print j, a, t }' "$f"
        done
    } | sort -u | while read -r id arr task; do
        [ "$arr" = "$a" ] && [ "$id" != "$a" ] && echo "$id <A_$task>"
    done >> "$IDS"
}

# ---------------------------------------------------------------- the table: how each script is submitted
plan() {
    case $1 in
        01-env) SCRIPT_ARGS=(a "b c"); JOBS=$(sub) ;;
        03-array)
            JOBS=$(sub)
            wait_gone 60 $JOBS
            map_array "$JOBS"
            ;;
        04-afterok)
            local j1 j2
            j1=$(sub)
            j2=$(sub --dependency=afterok:"$j1")
            echo "$j2 right after submission: $(squeue_state "$j2")" >> "$R.notes"
            JOBS="$j1 $j2"
            ;;
        05-afternotok)
            local j1 j2 j3
            j1=$(sub --export=ALL,COMPARE_EXIT=1)
            j2=$(sub --dependency=afternotok:"$j1")
            j3=$(sub --dependency=afterok:"$j1")
            wait_gone 60 "$j1" "$j2"
            wait_state 20 "$j3" 'DependencyNeverSatisfied' || true
            echo "$j3 after $j1 failed: $(squeue_state "$j3")" >> "$R.notes"
            scancel "$j3" || echo "scancel $j3 failed" >> "$R.notes"
            JOBS="$j1 $j2 $j3"
            ;;
        10-timelimit) JOBS=$(sub); WAIT=200 ;;
        11-export)
            JOBS="$(sub --export=ALL,FOO=bar) $(sub --export=NONE)"
            ;;
        12-chdir) mkdir -p "$D/sub"; JOBS=$(sub) ;;
        14-override) JOBS=$(sub --job-name=from-cli) ;;
        15-wrap)
            local cmd
            cmd=$(tail -n 1 "$S")
            local id n
            id=$(cd "$D" && sbatch --parsable --wrap="$cmd" 2>&1) || echo "sbatch failed: $id" >> "$R"
            id=${id%%;*}
            echo "$id <J1>" >> "$IDS"
            echo "$id: sbatch --parsable --wrap=<the last line of 15-wrap.sh>" >> "$R.subs"
            JOBS=$id
            ;;
        16-hold-release)
            JOBS=$(sub --hold)
            sleep 1
            echo "$JOBS after sbatch --hold: $(squeue_state "$JOBS")" >> "$R.notes"
            scontrol release "$JOBS" || echo "scontrol release $JOBS failed" >> "$R.notes"
            ;;
        17-scancel)
            JOBS=$(sub)
            wait_state 30 "$JOBS" '^RUNNING' || true
            for _ in $(seq 40); do grep -qs '^== batch' "$D"/*.out && break; sleep 0.25; done
            sleep 0.5
            echo "$JOBS before scancel: $(squeue_state "$JOBS")" >> "$R.notes"
            scancel "$JOBS" || echo "scancel $JOBS failed" >> "$R.notes"
            ;;
        *) JOBS=$(sub) ;;
    esac
}

run_one() { # run_one NN-name: submit, wait, write $OUT/NN-name.txt
    local name=$1
    S=$HERE/scripts/$name.sh D=$WORK/$name R=$WORK/$name.raw IDS=$WORK/$name.ids
    SCRIPT_ARGS=() JOBS="" WAIT=60
    rm -rf "$D" "$R" "$R.subs" "$R.notes"
    mkdir -p "$D"
    : > "$IDS"
    : > "$R"
    plan "$name"
    # shellcheck disable=SC2086
    wait_gone "$WAIT" $JOBS
    sleep 0.3 # the last lines of output files
    {
        echo "# $name"
        echo "## submitted"
        cat "$R.subs" 2> /dev/null || true
        cat "$R"
        if [ -s "$R.notes" ]; then echo "## observed"; cat "$R.notes"; fi
        echo "## files"
        (cd "$D" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
        local f
        for f in $(cd "$D" && find . -type f | sed 's|^\./||' | LC_ALL=C sort); do
            echo "## file $f"
            cat "$D/$f"
        done
        echo "## jobs"
        # shellcheck disable=SC2086
        job_states $JOBS
    } > "$R.all"
    normalize "$IDS" < "$R.all" > "$OUT/$name.txt"
}

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for s in "$HERE"/scripts/*.sh; do names+=("$(basename "$s" .sh)"); done
fi
start=$(date +%s)
bg=""
for name in "${names[@]}"; do
    [ -f "$HERE/scripts/$name.sh" ] || { echo "run.sh: no script $name" >&2; exit 2; }
    if [ "$name" = 10-timelimit ] && [ ${#names[@]} -gt 1 ]; then
        run_one "$name" & # a minute or more of waiting; it runs beside the others
        bg=$!
        sleep 1
        continue
    fi
    echo "run.sh: $name" >&2
    run_one "$name" || echo "run.sh: $name failed" >&2
done
if [ -n "$bg" ]; then
    echo "run.sh: waiting for 10-timelimit" >&2
    wait "$bg"
fi
echo "run.sh: ${#names[@]} scripts in $(($(date +%s) - start))s; results in $OUT" >&2
