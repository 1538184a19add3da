#!/usr/bin/env python3
"""Write the multi-team contention workloads of the sharing-stability report
(docs/PERFORMANCE.md, "Sharing under contention"): fleets, queue files and traces that look
like what a shared cluster sees, each aimed at one way sharing used to break.

- flood:  2 x 8 H100 + 2 x 8 A100; three teams weighted 2:1:1 with guarantees in proportion
          on their model, and a best-effort team (no guarantee) submitting about four times
          the fleet from t=0; the teams submit streams of 1-4 GPU jobs for eight hours.
- gangs:  4 x 8 H100; one team submits 16-GPU gangs (two nodes) every two hours while another
          streams 1-GPU jobs that keep every node partly busy.
- thrash: the case of issue 17 (also committed as crates/gantry-sim/tests/fixtures/thrash*).
- shape:  4 x 8 H100; "train" is guaranteed 16 GPUs and runs a few 1-GPU jobs on every node
          while "eval" borrows the rest with 7-GPU jobs; then train asks for whole nodes
          (8 GPUs), within its guarantee, that no single borrower's stop frees (issue 39).
- gang-borrow: 4 x 8 H100; "batch" (guaranteed 20) borrows with two 16-GPU gangs, so stopping
          either takes it below its guarantee; "serve" (guaranteed 12) then wants 1-4 GPUs.
- diurnal: a week on 8 x 8 H100; three teams weighted 3:2:1, guaranteed their weighted shares
          (32, 21, 11 GPUs), each with a daily peak at its own hour (about 1.3x the fleet at
          the peaks' overlap, half of it at night) and one team's periodic burst of 1-GPU
          jobs every six hours.
- weights: a week on 4 x 8 H100, no guarantees, one-hour half-life: "wide" (weight 3) submits
          8-GPU jobs while "narrow-a" and "narrow-b" (weight 1 each) stream 1-GPU jobs, about
          1.5x the fleet at the daily peak; weights-reclaim-queues.toml is the same tree with
          fair-share reclaim on.

Seeded and deterministic: running it again rewrites the same bytes.
Usage: python3 tools/contention-workloads.py OUT_DIR [--diurnal-seed N]
(--diurnal-seed: another week of the same shape; 43, the default, is the table's.)
"""
import json
import os
import random
import sys

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"


def fleet(path, nodes):
    with open(path, "w") as f:
        for name, count, model in nodes:
            f.write(f'[[node]]\nname = "{name}"\ncount = {count}\ncpu = 224\nmemory = "2TiB"\n'
                    f'[node.gpus]\nmodel = "{model}"\ncount = 8\n\n')


def write(path, lines):
    lines.sort(key=lambda l: (l["arrival_s"], l["job"]["name"]))
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":"), sort_keys=True) + "\n")


def job(arrival, duration, name, queue, gpus, **extra):
    spec = {"name": name, "queue": queue, "cpu": 4, "memory": "32GiB", "gpu": {"count": gpus}}
    spec.update(extra)
    return {"arrival_s": arrival, "duration_s": duration, "job": spec}


def flood(out):
    fleet(os.path.join(out, "flood-fleet.toml"), [("h100", 2, H100), ("a100", 2, A100)])
    with open(os.path.join(out, "flood-queues.toml"), "w") as f:
        f.write('[fair_share]\nhalf_life = "1h"\nstarvation = "1d"\n\n'
                '[[queue]]\nname = "best-effort"\nweight = 1\n\n'
                f'[[queue]]\nname = "research"\nweight = 2\nquota = [{{ flavor = "{H100}", guaranteed = 10 }}]\n\n'
                f'[[queue]]\nname = "vision"\nweight = 1\nquota = [{{ flavor = "{H100}", guaranteed = 6 }}]\n\n'
                f'[[queue]]\nname = "speech"\nweight = 1\nquota = [{{ flavor = "{A100}", guaranteed = 8 }}]\n')
    rng = random.Random(17)
    lines = []
    for i in range(160):
        lines.append(job(rng.randrange(0, 1800), rng.randrange(3600, 4 * 3600), f"be-{i:03d}", "best-effort",
                         rng.choice([1, 1, 2, 4, 8])))
    for team, model, n in [("research", H100, 90), ("vision", H100, 50), ("speech", A100, 60)]:
        for i in range(n):
            lines.append(job(1800 + rng.randrange(0, 8 * 3600), rng.randrange(900, 3 * 3600), f"{team}-{i:03d}",
                             team, rng.choice([1, 1, 2, 4]), model=[model]))
    write(os.path.join(out, "flood.jsonl"), lines)


def gangs(out):
    fleet(os.path.join(out, "gangs-fleet.toml"), [("h100", 4, H100)])
    with open(os.path.join(out, "gangs-queues.toml"), "w") as f:
        f.write('[fair_share]\nhalf_life = "1h"\nstarvation = "1d"\n\n'
                '[[queue]]\nname = "training"\nweight = 1\n\n[[queue]]\nname = "eval"\nweight = 1\n')
    rng = random.Random(23)
    lines = []
    for i in range(8):
        task = [{"name": "w", "replicas": 2, "cpu": 4, "memory": "32GiB", "gpu": {"count": 8}}]
        lines.append({"arrival_s": 600 + i * 7200, "duration_s": 5400,
                      "job": {"name": f"gang-{i}", "queue": "training", "time_limit": "2h", "task": task}})
    t = 0
    i = 0
    while t < 16 * 3600:
        t += rng.randrange(30, 150)
        lines.append(job(t, rng.randrange(1200, 3600), f"eval-{i:04d}", "eval", 1, time_limit="1h"))
        i += 1
    write(os.path.join(out, "gangs.jsonl"), lines)


def thrash(out):
    fleet(os.path.join(out, "thrash-fleet.toml"), [("h100", 2, H100)])
    with open(os.path.join(out, "thrash-queues.toml"), "w") as f:
        f.write('[fair_share]\nhalf_life = "1h"\nstarvation = "3d"\n'
                f'[[queue]]\nname = "a"\nquota = [{{ flavor = "{H100}", guaranteed = 8 }}]\n'
                f'[[queue]]\nname = "b"\nquota = [{{ flavor = "{H100}", guaranteed = 8 }}]\n')
    lines = [job(0, 7200, f"a{i}", "a", 8) for i in range(6)]
    lines += [job(600, 3600, f"b{i}", "b", 3) for i in range(12)]
    write(os.path.join(out, "thrash.jsonl"), lines)


def queues(path, entries, fair='[fair_share]\nhalf_life = "1h"\nstarvation = "1d"\n'):
    with open(path, "w") as f:
        f.write(fair + "\n")
        for name, weight, guaranteed in entries:
            f.write(f'[[queue]]\nname = "{name}"\nweight = {weight}\n')
            if guaranteed:
                f.write(f'quota = [{{ flavor = "{H100}", guaranteed = {guaranteed} }}]\n')
            f.write("\n")


def shape(out):
    fleet(os.path.join(out, "shape-fleet.toml"), [("h100", 4, H100)])
    queues(os.path.join(out, "shape-queues.toml"), [("train", 1, 16), ("eval", 1, 0)])
    rng = random.Random(39)
    lines = [job(0, 20 * 3600, f"eval-wide-{n}", "eval", 7, time_limit="24h") for n in range(4)]
    lines += [job(30, 20 * 3600, f"train-small-{n}", "train", 1, time_limit="24h") for n in range(4)]
    for i in range(6):
        lines.append(job(600 + i * 7200, 3600, f"train-node-{i}", "train", 8, time_limit="2h"))
    t, i = 900, 0
    while t < 12 * 3600:
        t += rng.randrange(300, 900)
        lines.append(job(t, rng.randrange(1800, 7200), f"eval-{i:03d}", "eval", rng.choice([1, 2, 4]),
                         time_limit="2h"))
        i += 1
    write(os.path.join(out, "shape.jsonl"), lines)


def gang_borrow(out):
    fleet(os.path.join(out, "gang-borrow-fleet.toml"), [("h100", 4, H100)])
    queues(os.path.join(out, "gang-borrow-queues.toml"), [("batch", 1, 20), ("serve", 1, 12)])
    rng = random.Random(41)
    task = [{"name": "w", "replicas": 2, "cpu": 4, "memory": "32GiB", "gpu": {"count": 8}}]
    lines = [{"arrival_s": 0, "duration_s": 20 * 3600,
              "job": {"name": f"gang-{n}", "queue": "batch", "time_limit": "24h", "task": task}} for n in range(2)]
    t, i = 600, 0
    while t < 12 * 3600:
        t += rng.randrange(600, 2400)
        lines.append(job(t, rng.randrange(1800, 3 * 3600), f"serve-{i:03d}", "serve", rng.choice([1, 1, 2, 4]),
                         time_limit="4h"))
        i += 1
    write(os.path.join(out, "gang-borrow.jsonl"), lines)


def diurnal(out, seed=43):
    fleet(os.path.join(out, "diurnal-fleet.toml"), [("h100", 8, H100)])
    teams = [("alpha", 3, 32, 10), ("beta", 2, 21, 16), ("gamma", 1, 11, 22)]
    queues(os.path.join(out, "diurnal-queues.toml"), [(n, w, g) for n, w, g, _ in teams])
    rng = random.Random(seed)
    lines = []
    for name, weight, _, peak in teams:
        t, i = 0, 0
        while t < 7 * 86400:
            hour = (t // 3600) % 24
            near = min(abs(hour - peak), 24 - abs(hour - peak))
            # Jobs per hour: high for six hours around the team's peak, low at night.
            rate = weight * (3.2 if near <= 3 else 0.8)
            t += max(1, int(rng.expovariate(rate / 3600)))
            gpus = rng.choice([1, 1, 1, 2, 2, 4, 8])
            length = rng.randrange(1800, 4 * 3600)
            lines.append(job(t, length, f"{name}-{i:05d}", name, gpus, time_limit="6h"))
            i += 1
    for k in range(7 * 4):
        for n in range(24):
            lines.append(job(k * 6 * 3600 + 5 * 3600, rng.randrange(1800, 3600), f"burst-{k:02d}-{n:02d}", "gamma", 1,
                             time_limit="2h"))
    write(os.path.join(out, "diurnal.jsonl"), [l for l in lines if l["arrival_s"] < 7 * 86400])


def weights(out):
    fleet(os.path.join(out, "weights-fleet.toml"), [("h100", 4, H100)])
    fair = '[fair_share]\nhalf_life = "1h"\nstarvation = "3d"\n'
    teams = [("wide", 3, 0), ("narrow-a", 1, 0), ("narrow-b", 1, 0)]
    queues(os.path.join(out, "weights-queues.toml"), teams, fair)
    queues(os.path.join(out, "weights-reclaim-queues.toml"), teams, fair + "\n[preemption]\nfair_share_reclaim = true\n")
    rng = random.Random(47)
    lines = []
    for name, gpus, per_hour, lo, hi in [("wide", 8, 1.2, 2 * 3600, 4 * 3600),
                                           ("narrow-a", 1, 14.0, 1800, 5400),
                                           ("narrow-b", 1, 14.0, 1800, 5400)]:
        t, i = 0, 0
        while t < 7 * 86400:
            hour = (t // 3600) % 24
            peak = 9 <= hour < 18
            t += max(1, int(rng.expovariate((per_hour if peak else per_hour / 3) / 3600)))
            lines.append(job(t, rng.randrange(lo, hi), f"{name}-{i:05d}", name, gpus, time_limit="6h"))
            i += 1
    write(os.path.join(out, "weights.jsonl"), [l for l in lines if l["arrival_s"] < 7 * 86400])


if __name__ == "__main__":
    args = sys.argv[1:]
    seed = 43
    if len(args) == 3 and args[1] == "--diurnal-seed" and args[2].isdigit():
        seed = int(args[2])
        args = args[:1]
    if len(args) != 1 or args[0].startswith("-"):
        sys.exit(__doc__)
    out = args[0]
    os.makedirs(out, exist_ok=True)
    flood(out)
    gangs(out)
    thrash(out)
    shape(out)
    gang_borrow(out)
    diurnal(out, seed)
    weights(out)
