"""The cost of replication: medians of `make bench-holds` (one PostgreSQL) beside
`make bench-holds HA=1` (a primary with synchronous quorum commit to two standbys), per
configuration and layer, with the ratio HA / single."""
import json
import statistics
import sys
from collections import defaultdict


def medians(path):
    runs = defaultdict(list)
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r["layer"] == "http":
            r["attempts_per_s"] = r["requests"] / r["seconds"]
        runs[(r["clients"], r["seats"], r["dist"], r["layer"])].append(r)
    return {k: (statistics.median(r["attempts_per_s"] for r in v), statistics.median(r["p99_ms"] for r in v))
            for k, v in runs.items()}


single, ha = medians(sys.argv[1]), medians(sys.argv[2])
order = {"http": 0, "command": 1, "pgbench": 2}
print("| clients | seats/hold | demand | layer | single attempts/s | HA attempts/s | HA / single | single p99 ms | HA p99 ms |")
print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
for key in sorted(set(single) & set(ha), key=lambda k: (k[0], k[1], k[2] != "uniform", order[k[3]])):
    (s, sp), (h, hp) = single[key], ha[key]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {s:.0f} | {h:.0f} | {h / s:.2f}x | {sp:.2f} | {hp:.2f} |")
