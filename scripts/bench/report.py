"""Prints bench-holds results as a markdown table: per configuration and layer, the median of
the repeated runs, onsale beside the pgbench baseline measured in the same run."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    r = json.loads(line)
    if r["layer"] == "http":
        r["attempts_per_s"] = r["requests"] / r["seconds"]
        r["holds_per_s"] = (r["requests"] - r["non2xx"]) / r["seconds"]
    runs[(r["clients"], r["seats"], r["dist"], r["layer"])].append(r)

def med(key, field):
    return statistics.median(r[field] for r in runs[key])

order = {"http": 0, "command": 1, "pgbench": 2}
# `make bench-holds STACK=1`: the machine's CPU per answered attempt (the read side's catch-up
# included for REST holds) beside pgbench's per guarded UPDATE.
cpu = any("cpu_us" in r for rs in runs.values() for r in rs)
print("| clients | seats/hold | demand | layer | runs | attempts/s | holds/s | p50 ms | p99 ms | attempts/s vs pgbench |"
      + (" machine CPU µs/attempt |" if cpu else ""))
print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if cpu else ""))
for key in sorted(runs, key=lambda k: (k[0], k[1], k[2] != "uniform", order[k[3]])):
    clients, seats, dist, layer = key
    base = (clients, seats, dist, "pgbench")
    ratio = med(key, "attempts_per_s") / med(base, "attempts_per_s") if base in runs else None
    print(f'| {clients} | {seats} | {dist} | {layer} | {len(runs[key])} | {med(key, "attempts_per_s"):.0f} | '
          f'{med(key, "holds_per_s"):.0f} | {med(key, "p50_ms"):.2f} | {med(key, "p99_ms"):.2f} | '
          f'{f"{ratio:.2f}x" if ratio else "-"} |'
          + (f' {med(key, "cpu_us"):.0f} |' if cpu and all("cpu_us" in r for r in runs[key]) else (" - |" if cpu else "")))
