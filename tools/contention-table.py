#!/usr/bin/env python3
"""Replay every contention workload (tools/contention-workloads.py) with one gantry binary and
print the table of docs/PERFORMANCE.md, "Guarantees for shapes, bounded churn": per workload
and backfill mode, what started, preemptions (most per job), GPU-hours lost (and their share
of the fleet's GPU-hours over the replay), the longest wait within a guarantee, the longest
stretch a queue with waiting work held no GPU, the longest wait per queue, mean allocation,
weighted Jain against entitlement, and the replay's wall time.

Usage: python3 tools/contention-table.py GANTRY_BINARY [WORKLOAD_DIR]
(WORKLOAD_DIR is written first if it holds no workloads; default: a temporary directory.)
Run it with the binary before a change and after, on the same machine.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

# (label, workload files' prefix, queue file's prefix, replay horizon in seconds)
CASES = [
    ("thrash", "thrash", "thrash", 86400),
    ("flood", "flood", "flood", 86400),
    ("gangs", "gangs", "gangs", 86400),
    ("shape", "shape", "shape", 86400),
    ("gang-borrow", "gang-borrow", "gang-borrow", 86400),
    ("diurnal", "diurnal", "diurnal", 8 * 86400),
    ("weights", "weights", "weights", 8 * 86400),
    ("weights, fair-share reclaim", "weights", "weights-reclaim", 8 * 86400),
]


def replay(binary, d, trace, queues, backfill, until):
    cmd = [binary, "sim", "--fleet", f"{d}/{trace}-fleet.toml", "--trace", f"{d}/{trace}.jsonl",
           "--order", "fair-share", "--queues", f"{d}/{queues}-queues.toml", "--preempt",
           "--backfill", backfill, "--until", str(until), "--json"]
    start = time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0], time.monotonic() - start


def worst(by_queue):
    if not by_queue:
        return "–"
    queue, seconds = max(by_queue.items(), key=lambda kv: kv[1])
    return f"{seconds:,} s ({queue})"


def row(label, backfill, r, wall):
    span_h = r["series"][-1]["time_s"] / 3600 if r["series"] else 0
    lost_h = r["preempted_gpu_s_lost"] / 3600
    lost_pct = 100 * lost_h / (r["fleet_gpus"] * span_h) if span_h else 0
    guarantee = r.get("guarantee_wait_max_s")
    zero = r.get("zero_gpus_waiting_max_by_queue_s")
    jain = r.get("jain_entitled_mean")
    cells = [
        label, backfill, f"{r['started']}/{r['pods']}",
        f"{r['preemptions']} ({r['preemptions_per_job_max']})",
        f"{lost_h:,.1f} ({lost_pct:.1f} %)",
        "–" if guarantee is None else f"{guarantee:,} s",
        "–" if zero is None else worst(zero),
        worst(r["delay_max_by_queue_s"]),
        f"{r['mean_alloc_pct']:.1f} %",
        "–" if jain is None else f"{jain:.3f}",
        f"{wall:.2f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    d = sys.argv[2] if len(sys.argv) == 3 else tempfile.mkdtemp(prefix="contention-")
    if not os.path.exists(os.path.join(d, "weights.jsonl")):
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "contention-workloads.py"), d], check=True)
    print("| workload | backfill | started | preemptions (most per job) | GPU-h lost | "
          "longest wait within a guarantee | longest at 0 GPUs while waiting | longest wait | "
          "mean allocated | Jain vs entitlement | time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, trace, queues, until in CASES:
        for backfill in ("greedy", "reserve"):
            try:
                r, wall = replay(binary, d, trace, queues, backfill, until)
            except subprocess.CalledProcessError as e:
                why = (e.stderr.strip().splitlines() or ["no output"])[0][:100]
                print(f"| {label} | {backfill} | failed: {why} |")
                continue
            print(row(label, backfill, r, wall))


if __name__ == "__main__":
    main()
