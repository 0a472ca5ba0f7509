"""make bench-cdc's reader of the topics (confluent-kafka, from the stack's Python tools).

  offsets BROKERS TOPIC            the topic's high watermarks, {"partition": offset} as JSON
  wait BROKERS TOPIC FROM N SECS   waits until N messages were appended after the offsets FROM
                                   (JSON, as `offsets` printed) and prints the seconds it took;
                                   exits 1 if they are not there within SECS
  latency BROKERS TOPIC FROM       commit-to-topic latency of every message after FROM: the
                                   broker's append time (the topic's timestamps are
                                   LogAppendTime) less the commit time in its envelope
                                   (`source.ts_ms`, the same field in Debezium's and the relay's)
  report RESULTS                   the medians of the rounds in RESULTS (JSON lines) as Markdown
"""
import json
import statistics
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def consumer(brokers):
    return Consumer({"bootstrap.servers": brokers, "group.id": "bench-cdc", "enable.auto.commit": False})


def offsets(c, topic):
    """Retried for 30 s while the cluster settles (a topic just created has no leader yet)."""
    for attempt in range(300):
        try:
            return offsets_once(c, topic)
        except KafkaException:
            if attempt == 299:
                raise
            time.sleep(0.1)


def offsets_once(c, topic):
    md = c.list_topics(topic, timeout=10).topics[topic]
    if md.error is not None and md.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return {}  # Debezium's topic is created with its first message
    if md.error is not None:
        raise SystemExit(f"{topic}: {md.error}")
    return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions}


def appended(now, since):
    return sum(o - since.get(p, 0) for p, o in now.items())


def wait(c, topic, since, n, secs):
    t0 = time.monotonic()
    while appended(offsets(c, topic), since) < n:
        if time.monotonic() - t0 > secs:
            raise SystemExit(f"{topic}: fewer than {n} messages after {secs} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def latency(c, topic, since):
    end = offsets(c, topic)
    todo = {p: o for p, o in end.items() if o > since.get(p, 0)}
    c.assign([TopicPartition(topic, p, since.get(p, 0)) for p in todo])
    lat = []
    while todo:
        msgs = c.consume(1000, timeout=5)
        if not msgs:
            raise SystemExit(f"{topic}: no message within 5 s with {todo} left")
        for m in msgs:
            if m.error():
                raise SystemExit(f"{topic}: {m.error()}")
            if m.offset() + 1 >= todo.get(m.partition(), 0):
                todo.pop(m.partition(), None)
            if m.value() is None:
                continue
            kind, at = m.timestamp()
            if kind != 2:  # TIMESTAMP_LOG_APPEND_TIME
                raise SystemExit(f"{topic}: timestamps are not the broker's append time")
            lat.append(at - json.loads(m.value())["source"]["ts_ms"])
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"messages": len(lat), "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": lat[-1]}


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    med = lambda who, key: statistics.median(r[key] for r in rows if r["cdc"] == who)
    names = {"relay": "onsale relay", "debezium": "Debezium 3.6.1 on Connect 4.1.1"}
    out = [
        f"Rounds: {len({r['round'] for r in rows})}, medians. Backlog: the events the command layer wrote "
        "while both were stopped, each then resumed alone. Live: both at once under a steady insert rate.",
        "",
        "| CDC | backlog events/s | process µs/event | its PostgreSQL backends µs/event | both µs/event "
        "| live process µs/event | live backends µs/event | commit-to-topic p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for who in ("relay", "debezium"):
        if not any(r["cdc"] == who for r in rows):
            continue
        out.append(
            f"| {names[who]} | {med(who, 'events_per_s'):,.0f} | {med(who, 'proc_us'):.1f} | {med(who, 'pg_us'):.1f} "
            f"| {med(who, 'proc_us') + med(who, 'pg_us'):.1f} | {med(who, 'live_proc_us'):.1f} | {med(who, 'live_pg_us'):.1f} "
            f"| {med(who, 'p50_ms'):.0f} | {med(who, 'p99_ms'):.0f} |"
        )
    if {r["cdc"] for r in rows} >= {"relay", "debezium"}:
        ratio = lambda key: med("relay", key) / med("debezium", key)
        out += [
            "",
            f"relay / Debezium, CPU per event of the process alone: {ratio('proc_us'):.2f}x (backlog), "
            f"{ratio('live_proc_us'):.2f}x (live); with their PostgreSQL backends: "
            f"{(med('relay', 'proc_us') + med('relay', 'pg_us')) / (med('debezium', 'proc_us') + med('debezium', 'pg_us')):.2f}x",
        ]
    print("\n".join(out))


def main():
    cmd = sys.argv[1]
    if cmd == "report":
        report(sys.argv[2])
        return
    c = consumer(sys.argv[2])
    topic = sys.argv[3]
    try:
        if cmd == "offsets":
            print(json.dumps(offsets(c, topic)))
        elif cmd == "wait":
            since = {int(k): v for k, v in json.loads(sys.argv[4]).items()}
            print(f"{wait(c, topic, since, int(sys.argv[5]), float(sys.argv[6])):.3f}")
        elif cmd == "latency":
            since = {int(k): v for k, v in json.loads(sys.argv[4]).items()}
            print(json.dumps(latency(c, topic, since)))
        else:
            raise SystemExit(f"unknown command {cmd}")
    finally:
        c.close()


if __name__ == "__main__":
    main()
