#!/usr/bin/env python3
"""run_queue.py SECONDS: where the machine's threads spent the next SECONDS, per process
group: the CPU they ran (cores) and the time they were runnable but waiting for a core
(the run-queue wait of every thread, summed, per second: "waiting"), from the kernel's
/proc/<pid>/task/<tid>/schedstat. wait/cpu is how long a group's threads waited for each
unit of CPU they got: the queueing a request meets on the way, beside the work it does."""
import collections
import os
import sys
import time

GROUPS = ["onsale serve", "onsale relay", "onsale project", "onsale-loadgen", "kafka.Kafka",
          "redis-server", "onsale-processor-sim", "postgres"]


def group(cmdline):
    return next((g for g in GROUPS if g in cmdline), "other")


def snapshot():
    seen = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            for tid in os.listdir(f"/proc/{pid}/task"):
                ran, waited, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                seen[(pid, tid)] = (group(cmdline), int(ran), int(waited))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # a thread that ended meanwhile
    return seen


before, t0 = snapshot(), time.time()
time.sleep(float(sys.argv[1]))
after, dt = snapshot(), time.time() - t0
totals = collections.defaultdict(lambda: [0, 0])
for key, (g, ran, waited) in after.items():
    if key in before:
        totals[g][0] += ran - before[key][1]
        totals[g][1] += waited - before[key][2]
print("| process | cpu (cores) | waiting for a core (threads) | wait/cpu |")
print("|---|---:|---:|---:|")
rows = sorted(totals.items(), key=lambda kv: -kv[1][0]) + [("all", [sum(v[0] for v in totals.values()), sum(v[1] for v in totals.values())])]
for g, (ran, waited) in rows:
    print(f"| {g} | {ran / 1e9 / dt:.2f} | {waited / 1e9 / dt:.2f} | {waited / max(ran, 1):.2f} |")
