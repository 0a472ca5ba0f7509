"""Commit-to-projection lag from two scrapes of the projector's /metrics (before and after a
load): the histogram onsale_projection_lag_seconds of one projection, differenced, read as
p50/p99 (the upper bound of the bucket each falls in). usage: lag.py BEFORE AFTER PROJECTION"""
import json
import re
import sys


def buckets(path, projection):
    out = {}
    pat = re.compile(r'onsale_projection_lag_seconds_bucket\{(.*)\} (\S+)')
    for line in open(path):
        m = pat.match(line)
        if not m or f'projection="{projection}"' not in m.group(1):
            continue
        le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
        out[float("inf") if le == "+Inf" else float(le)] = float(m.group(2))
    return out


before, after = buckets(sys.argv[1], sys.argv[3]), buckets(sys.argv[2], sys.argv[3])
diff = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
total = diff[-1][1] if diff else 0


def quantile(q):
    for le, n in diff:
        if n >= q * total:
            return le
    return float("nan")


print(json.dumps({"events": int(total), "p50_le_ms": quantile(0.5) * 1000, "p99_le_ms": quantile(0.99) * 1000}))
