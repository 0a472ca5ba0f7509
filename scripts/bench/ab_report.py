#!/usr/bin/env python3
"""The table of `make bench-ab` (scripts/bench-ab.sh): one row per point, then each side's
medians.

    python3 scripts/bench/ab_report.py DIR

DIR holds, per point, SIDE-ROUND.json (onsale-loadgen bench-tail --json's last line),
SIDE-ROUND.cpu (cpu_by_process.py's output) and SIDE-ROUND.rss (`onsale serve`'s resident KiB).
"""
import json
import os
import statistics
import sys


def cores(path):
    out = {}
    with open(path) as f:
        for line in f:
            name, _, value = line.rstrip().rpartition(" ")
            if name.strip():
                out[name.strip()] = float(value)
    return out


def main(d):
    rows = []
    for name in sorted(os.listdir(d), key=lambda n: (int(n.split("-")[1].split(".")[0]), n)):
        if not name.endswith(".json"):
            continue
        stem = name[: -len(".json")]
        side, rnd = stem.split("-")
        with open(os.path.join(d, name)) as f:
            p = json.loads(f.read())
        cpu = cores(os.path.join(d, stem + ".cpu"))
        with open(os.path.join(d, stem + ".rss")) as f:
            rss_mb = int(f.read().strip() or 0) / 1024
        rows.append((side, int(rnd), p, cpu, rss_mb))
    cols = ["p50_ms", "p99_ms", "p999_ms", "max_ms", "over_100ms", "over_1s", "errors"]
    parts = ["serve", "pg <- serve", "relay", "pg <- relay", "project", "pg <- project", "total"]
    print("| side | round | answered/s | p50 ms | p99 ms | p99.9 ms | max ms | > 100 ms | > 1 s "
          "| errors | " + " | ".join(f"{c}, cores" for c in parts) + " | serve RSS MB |")
    print("|---|---:|" + "---:|" * (len(cols) + 1 + len(parts) + 1))
    for side, rnd, p, cpu, rss in rows:
        print(f"| {side} | {rnd} | {p['answered_per_sec']:,.0f} | "
              + " | ".join(f"{p[c]:,}" for c in cols) + " | "
              + " | ".join(f"{cpu.get(c, 0):.2f}" for c in parts) + f" | {rss:,.0f} |")
    print()
    print("| side | points | p50 ms | p99 ms | p99.9 ms | max ms | > 100 ms | serve, cores | total, cores |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for side in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == side]
        med = lambda f: statistics.median(f(r) for r in mine)  # noqa: E731
        print(f"| {side} (medians) | {len(mine)} | {med(lambda r: r[2]['p50_ms']):.1f} | "
              f"{med(lambda r: r[2]['p99_ms']):.1f} | {med(lambda r: r[2]['p999_ms']):.1f} | "
              f"{med(lambda r: r[2]['max_ms']):.1f} | {med(lambda r: r[2]['over_100ms']):,.0f} | "
              f"{med(lambda r: r[3].get('serve', 0)):.2f} | {med(lambda r: r[3].get('total', 0)):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
