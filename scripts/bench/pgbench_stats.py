"""Turns pgbench's per-transaction logs into the same JSON the other layers print."""
import glob
import json
import statistics
import sys

directory, seconds, won, seats = sys.argv[1], float(sys.argv[2]), int(sys.argv[3] or 0), int(sys.argv[4])
latencies = []
for path in glob.glob(f"{directory}/pgblog*"):
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                latencies.append(int(parts[2]))
latencies.sort()
def q(p):
    return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1000 if latencies else 0
print(json.dumps({
    "attempts_per_s": len(latencies) / seconds,
    # Seats won, as whole holds (a 4-seat baseline transaction may win fewer than four).
    "holds_per_s": won / seats / seconds,
    "p50_ms": q(0.5),
    "p99_ms": q(0.99),
}))
