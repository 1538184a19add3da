#!/usr/bin/env python3
"""Write the reclaim and starvation fixtures of the queue-policy validation
(crates/gantry-sim/tests/fixtures/{reclaim,starvation}.jsonl; docs/PERFORMANCE.md).

Seeded and deterministic: running it again rewrites the same bytes.
Usage: python3 tools/queue-fixtures.py [OUT_DIR]
"""
import json
import random
import sys


def write(path, lines):
    lines.sort(key=lambda l: (l["arrival_s"], l["job"]["name"]))
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":"), sort_keys=True) + "\n")


def job(arrival, duration, name, queue, cpu, memory, gpus):
    return {"arrival_s": arrival, "duration_s": duration,
            "job": {"name": name, "queue": queue, "cpu": cpu, "memory": memory, "gpu": {"count": gpus}}}


def reclaim(path):
    # team-a floods the 64-GPU fleet from t=0 (96 jobs of 1-4 GPUs, 2-4 h: it borrows all
    # that team-b leaves idle); team-b, guaranteed half the fleet, submits 24 jobs of 1-2
    # GPUs from t=1800 on, never more than its guarantee at once.
    rng = random.Random(4)
    lines = [job(rng.randrange(0, 600), rng.randrange(7200, 14400), f"a-{i:03d}", "team-a", 4, "32GiB",
                 rng.choice([1, 1, 2, 4])) for i in range(96)]
    lines += [job(1800 + rng.randrange(0, 3600), rng.randrange(600, 1800), f"b-{i:03d}", "team-b", 4, "32GiB",
                  rng.choice([1, 2])) for i in range(24)]
    write(path, lines)


def starvation(path):
    # Two small teams keep the fleet about 85 % busy with 1-GPU jobs (10-60 min) for two
    # days; team-wide submits one 8-GPU job (2 h) every 4 hours. Greedy backfill fills each
    # GPU a node frees with a small job, so a whole free node is rare.
    rng = random.Random(11)
    lines, t, i = [], 0.0, 0
    rate = 0.85 * 64 / 2100
    while t < 2 * 86400:
        t += rng.expovariate(rate)
        team = "team-s1" if rng.random() < 0.5 else "team-s2"
        lines.append(job(int(t), rng.randrange(600, 3600), f"s-{i:05d}", team, 4, "32GiB", 1))
        i += 1
    lines += [job(3600 + k * 4 * 3600, 7200, f"wide-{k:02d}", "team-wide", 32, "256GiB", 8) for k in range(12)]
    write(path, lines)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "crates/gantry-sim/tests/fixtures"
    reclaim(f"{out}/reclaim.jsonl")
    starvation(f"{out}/starvation.jsonl")
