#!/usr/bin/env python3
"""Where the free GPU capacity sits at the end of a Protocol-A run.

Reads a node list, a pod list and `gantry sim --decisions-out` of one run, rebuilds the
final state and splits the free GPU compute into: partially used GPUs (by free amount),
wholly free GPUs on nodes without CPU for any GPU pod, and wholly free GPUs otherwise.

    gantry sim --nodes N.csv --pods P.csv --policy default --decisions-out dec.csv
    python3 tools/stranded-capacity.py N.csv P.csv dec.csv
"""
import collections
import csv
import sys


def main(node_csv, pod_csv, decisions_csv):
    nodes = {r["sn"]: r for r in csv.DictReader(open(node_csv))}
    pods = {r["name"]: r for r in csv.DictReader(open(pod_csv))}
    cpu = {n: int(r["cpu_milli"]) for n, r in nodes.items()}
    free = {n: [1000] * int(r["gpu"]) for n, r in nodes.items()}
    for d in csv.DictReader(open(decisions_csv)):
        if d["node"] == "FAILED":
            continue
        pod = pods[d["pod"].split("-tuned-")[0]]
        cpu[d["node"]] -= int(pod["cpu_milli"])
        count, milli = int(pod["num_gpu"]), int(pod["gpu_milli"])
        if count:
            for g in d["gpu_index"].split("-"):
                free[d["node"]][int(g)] -= 1000 if count > 1 or milli >= 1000 else milli
    capacity = sum(len(v) for v in free.values()) * 1000
    min_cpu = min(int(p["cpu_milli"]) for p in pods.values() if int(p["num_gpu"]) > 0)
    kinds, holes = collections.Counter(), collections.Counter()
    for n, gpus in free.items():
        for f in gpus:
            if f == 0:
                continue
            if cpu[n] < min_cpu:
                kinds["wholly or partly free GPU, node out of CPU"] += f
            elif f < 1000:
                kinds["partly used GPU"] += f
                holes[f] += f
            else:
                kinds["wholly free GPU"] += f
    print(f"free: {sum(kinds.values()) / capacity * 100:.2f} % of GPU capacity")
    for kind, milli in kinds.most_common():
        print(f"  {kind}: {milli / capacity * 100:.2f} %")
    print("  largest partial holes (free milli-GPU: % of capacity):")
    for f, milli in holes.most_common(5):
        print(f"    {f}: {milli / capacity * 100:.2f} %")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
