"""Prints bench-ga results as a markdown table: per configuration and layer, the median of the
repeated runs, onsale beside the counter SQL with one bucket and with K, measured in the same run."""
import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(list)
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        runs[(r["clients"], r["qty"], r["layer"])].append(r)

def med(key, field):
    return statistics.median(r[field] for r in runs[key])

layers = sorted({k[2] for k in runs}, key=lambda l: (not l.startswith("onsale"), l))
print("| clients | places/hold | layer | runs | attempts/s | holds/s | p50 ms | p99 ms | holds/s vs counter K=1 |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for clients, qty in sorted({(k[0], k[1]) for k in runs}):
    base = (clients, qty, "counter K=1")
    for layer in layers:
        key = (clients, qty, layer)
        if key not in runs:
            continue
        ratio = med(key, "holds_per_s") / med(base, "holds_per_s") if base in runs else None
        print(f'| {clients} | {qty} | {layer} | {len(runs[key])} | {med(key, "attempts_per_s"):.0f} | '
              f'{med(key, "holds_per_s"):.0f} | {med(key, "p50_ms"):.2f} | {med(key, "p99_ms"):.2f} | '
              f'{f"{ratio:.2f}x" if ratio else "-"} |')
