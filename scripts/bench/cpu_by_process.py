#!/usr/bin/env python3
"""CPU of the local stack's processes over a window, in cores (BENCHMARKS.md, issue 30).

    python3 scripts/bench/cpu_by_process.py SECONDS

Reads /proc/<pid>/stat at the start and the end of the window. Each PostgreSQL backend is
counted to the process on the other end of its socket (`ss -tnp`), as "pg <- serve",
"pg <- relay", "pg <- project"; the other PostgreSQL processes (WAL writer, checkpointer) as
"pg-other". The onsale processes by their subcommand, the load generator (wrk or
onsale-loadgen) as "client". Run it beside a load, as root (ss names other users' sockets).
"""
import os
import re
import subprocess
import sys
import time


def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def processes():
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    procs = {}
    for line in out.splitlines()[1:]:
        pid, _, args = line.strip().partition(" ")
        procs[pid] = args
    return procs


def name_of(args):
    words = args.split()
    # The service's processes by their subcommand, whatever the binary's path (bench-ab runs
    # copies of other builds: AB_A_BIN, AB_B_BIN).
    base = os.path.basename(words[0]) if words else ""
    if len(words) > 1 and base.startswith("onsale") and base not in ("onsale-loadgen", "onsale-processor-sim"):
        return words[1]
    if "kafka.Kafka" in args:
        return "kafka"
    if "redis-server" in args:
        return "redis"
    if args.startswith("wrk") or "onsale-loadgen" in args:
        return "client"
    if "prometheus" in args:
        return "prometheus"
    if "processor-sim" in args:
        return "processor-sim"
    return None


def groups():
    procs = processes()
    sockets = {}
    out = subprocess.run(["ss", "-tnp", "state", "established"], capture_output=True, text=True).stdout
    for line in out.splitlines()[1:]:
        parts = line.split()
        m = re.search(r"pid=(\d+)", line)
        if len(parts) >= 4 and m:
            sockets[(parts[2], parts[3])] = m.group(1)
    group = {}
    for (local, peer), pid in sockets.items():
        if procs.get(pid, "").startswith("postgres:"):
            client = sockets.get((peer, local))
            owner = name_of(procs.get(client, "")) if client else None
            group[pid] = f"pg <- {owner or os.path.basename(procs.get(client, '?').split(' ')[0])}"
    for pid, args in procs.items():
        if pid in group:
            continue
        if args.startswith("postgres"):
            group[pid] = "pg-other"
        elif name_of(args):
            group[pid] = name_of(args)
    return {pid: (g, ticks(pid)) for pid, g in group.items()}


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    hz = os.sysconf("SC_CLK_TCK")
    before, started = groups(), time.time()
    time.sleep(seconds)
    after, took = groups(), time.time() - started
    cores = {}
    for pid, (g, t) in after.items():
        if t is None:
            continue
        t0 = before.get(pid, (g, 0))[1] or 0
        cores[g] = cores.get(g, 0.0) + (t - t0) / hz / took
    for g, c in sorted(cores.items(), key=lambda kv: -kv[1]):
        if c >= 0.005:
            print(f"{g:16s} {c:.2f}")
    print(f"{'total':16s} {sum(cores.values()):.2f}")


if __name__ == "__main__":
    main()
