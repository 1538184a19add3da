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

Seeded and deterministic: running it again rewrites the same bytes.
Usage: python3 tools/contention-workloads.py OUT_DIR
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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    flood(out)
    gangs(out)
    thrash(out)
