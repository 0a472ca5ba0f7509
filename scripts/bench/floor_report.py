"""Prints make bench-floor's results: per piece the median of the runs, its CPU per operation,
the floor they add up to per hold, and the ceiling that leaves two cores, beside pgbench."""
import json
import statistics
import sys
from collections import defaultdict

CORES = 2
runs = defaultdict(list)
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        runs[r["piece"]].append(r)


def med(piece, f):
    return statistics.median(f(r) for r in runs[piece])


def own(r):
    """CPU µs per operation: the machine's busy cores over the run less its idle load before."""
    return max(r["busy"] - r["idle"], 0) / r["per_s"] * 1e6


pgbench = med("pgbench", lambda r: r["per_s"])
pieces = [
    ("http", "a request that does nothing (`GET /healthz`, wrk included)", med("http", own), med("http", lambda r: r["per_s"])),
    ("limits", "the per-account GCRA script (Redis's own CPU)", med("limits", lambda r: r["server_cpu_s"] / r["ops"] * 1e6), med("limits", lambda r: r["per_s"])),
    ("command", "the command layer (owners, group commit, PostgreSQL)", med("command", own), med("command", lambda r: r["per_s"])),
    ("decode", "logical decoding of the hold's events, once", med("decode", lambda r: r["seconds"] / r["ops"] * 1e6), med("decode", lambda r: r["rows"] / r["seconds"])),
]
floor = sum(p[2] for p in pieces)
ceiling = CORES / floor * 1e6
stack = med("stack", lambda r: r["per_s"])
print(f"runs: {len(runs['pgbench'])}; medians; CPU per hold attempt of each piece run alone on the {CORES} cores")
print()
print("| piece | what | alone, per s | CPU µs per attempt |")
print("|---|---|---:|---:|")
for name, what, us, per_s in pieces:
    print(f"| {name} | {what} | {per_s:,.0f} | {us:.1f} |")
print(f"| **floor** | the four together | | **{floor:.1f}** |")
print()
print("| what | attempts/s | vs pgbench |")
print("|---|---:|---:|")
print(f"| pgbench, the design's guarded UPDATE | {pgbench:,.0f} | 1.00x |")
print(f"| three times pgbench (the issue's bar) | {3 * pgbench:,.0f} | 3.00x |")
print(f"| the ceiling: {CORES} cores / the floor | {ceiling:,.0f} | {ceiling / pgbench:.2f}x |")
print(f"| the ceiling without the command layer | {CORES / (floor - pieces[2][2]) * 1e6:,.0f} | {CORES / (floor - pieces[2][2]) * 1e6 / pgbench:.2f}x |")
rs = med("read_side", lambda r: max(r["busy"] - r["idle"], 0) * r["seconds"] / r["ops"] * 1e6)
per_event = med("read_side", lambda r: max(r["busy"] - r["idle"], 0) * r["seconds"] / r["events"] * 1e6)
events = med("read_side", lambda r: r["events"] / r["ops"])
# The read side's time includes the relay's decoding: the decode piece is not counted twice.
with_read = CORES / (floor - pieces[3][2] + rs) * 1e6
print(f"| the ceiling with the read side at its best ({rs:.1f} µs per attempt: {events:.2f} events, {per_event:.1f} µs each, the relay's decoding included) | {with_read:,.0f} | {with_read / pgbench:.2f}x |")
print(f"| REST holds on the whole stack (p99 {med('stack', lambda r: r['p99_ms']):.0f} ms) | {stack:,.0f} | {stack / pgbench:.2f}x |")
