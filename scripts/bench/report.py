"""Prints bench-holds results as a markdown table, onsale beside the pgbench baseline."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if r["layer"] == "http":
        r["attempts_per_s"] = r["requests"] / r["seconds"]
        r["holds_per_s"] = (r["requests"] - r["non2xx"]) / r["seconds"]
base = {(r["clients"], r["seats"], r["dist"]): r for r in rows if r["layer"] == "pgbench"}
print("| clients | seats/hold | demand | layer | attempts/s | holds/s | p50 ms | p99 ms | attempts vs pgbench |")
print("|---:|---:|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    b = base.get((r["clients"], r["seats"], r["dist"]))
    ratio = f'{r["attempts_per_s"] / b["attempts_per_s"]:.2f}x' if b and b["attempts_per_s"] else "-"
    print(f'| {r["clients"]} | {r["seats"]} | {r["dist"]} | {r["layer"]} | {r["attempts_per_s"]:.0f} | '
          f'{r["holds_per_s"]:.0f} | {r["p50_ms"]:.2f} | {r["p99_ms"]:.2f} | {ratio} |')
