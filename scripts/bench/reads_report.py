"""Prints BENCHMARKS.md's read-path tables from make bench-reads' JSON lines (medians of the
repeats, and onsale's share of nginx's throughput measured in the same run)."""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| map | server | reads/s (median) | p50 ms | p99 ms | bytes/answer | onsale / nginx |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for kind in ("counts", "section"):
    med = {}
    for server in ("onsale", "nginx"):
        rs = [r for r in rows if r.get("bench") == "snapshot" and r["kind"] == kind and r["server"] == server]
        if not rs:
            continue
        rps = statistics.median(r["requests"] / r["seconds"] for r in rs)
        med[server] = rps
        print(f"| {kind} | {server} | {rps:,.0f} | {statistics.median(r['p50_ms'] for r in rs):.2f} | "
              f"{statistics.median(r['p99_ms'] for r in rs):.2f} | {rs[0]['bytes'] // max(rs[0]['requests'], 1)} | "
              + (f"{med['onsale'] / rps:.0%} |" if server == "nginx" and "onsale" in med else "|"))
for r in rows:
    if r.get("bench") == "sse":
        print(f"\nSSE: {r['connected']:,} of {r['subscribers']:,} subscribers connected ({r['failed']} failed) in "
              f"{r['connect_secs']:.1f} s; {r['holds']} holds; {r['samples']:,} hold-to-delta samples "
              f"({r['missing']} missing): p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms")
    if r.get("bench") == "lag":
        print(f"\nCommit-to-seat-map lag (Apache Kafka, {r.get('brokers', '1')} broker(s)) at {r['holds_per_sec']:,.0f} granted holds/s ({r['sent']:,} attempts at "
              f"{r['target_per_sec']:,}/s, {r['refused']:,} refused as taken, {r['failed']} failed): "
              f"{r['events']:,} events, p50 <= {r['p50_le_ms']:.0f} ms, p99 <= {r['p99_le_ms']:.0f} ms")
