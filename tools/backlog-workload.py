#!/usr/bin/env python3
"""Write a backlog workload for the replay's cost with many waiting jobs (issue 39, item 7;
docs/PERFORMANCE.md, "Replay cost with many waiting jobs"): 4 x 8 H100, four flat queues of
equal weight, and N jobs of 1 GPU (one in eight asks for 2) arriving within the first ten
minutes, each running 1 to 4 hours — so almost all of them wait, and every arrival and every
end is an event whose cycle faces the whole waiting list.

Seeded and deterministic: running it again rewrites the same bytes.
Usage: python3 tools/backlog-workload.py N OUT_DIR   (writes backlog-N.jsonl, backlog-fleet.toml,
backlog-queues.toml)
"""
import json
import os
import random
import sys


def main():
    if len(sys.argv) != 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: backlog-workload.py N OUT_DIR  (N: jobs, a positive integer)")
    n, out = int(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "backlog-fleet.toml"), "w") as f:
        f.write('[[node]]\nname = "h100"\ncount = 4\ncpu = 224\nmemory = "2TiB"\n'
                '[node.gpus]\nmodel = "H100-SXM5-80GB"\ncount = 8\n')
    with open(os.path.join(out, "backlog-queues.toml"), "w") as f:
        f.write('[fair_share]\nhalf_life = "1h"\n\n')
        for q in ["a", "b", "c", "d"]:
            f.write(f'[[queue]]\nname = "{q}"\nweight = 1\n\n')
    rng = random.Random(39)
    lines = []
    for i in range(n):
        gpus = 2 if rng.randrange(8) == 0 else 1
        spec = {"name": f"j{i:06d}", "queue": "abcd"[i % 4], "cpu": 4, "memory": "32GiB",
                "gpu": {"count": gpus}}
        lines.append({"arrival_s": rng.randrange(0, 600), "duration_s": rng.randrange(3600, 4 * 3600),
                      "job": spec})
    lines.sort(key=lambda l: (l["arrival_s"], l["job"]["name"]))
    with open(os.path.join(out, f"backlog-{n}.jsonl"), "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":"), sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
