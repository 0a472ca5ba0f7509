#!/usr/bin/env python3
"""A sample consumer of the onsale.events topic (docs/topic.md): reads it from the beginning of
history, drops the repeats that at-least-once delivery brings, and prints one JSON object a
line per event: show, sequence, type, commit LSN, commit time, and the event.

    pip install confluent-kafka
    python3 kafka/examples/consume_topic.py --brokers 127.0.0.1:9092 [--show ID] [--idle-secs 5]

Without --idle-secs it follows the topic for ever; with it, it stops once nothing has arrived
for that long.
"""
import argparse
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", default="onsale.events")
    ap.add_argument("--show", help="this show's events only")
    ap.add_argument("--idle-secs", type=float, help="stop after this long without a message")
    args = ap.parse_args()

    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        # A group of its own that commits nothing: every run reads history from offset 0.
        "group.id": f"onsale-sample-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    meta = consumer.list_topics(args.topic, timeout=10)
    if args.topic not in meta.topics or meta.topics[args.topic].error is not None:
        sys.exit(f"no topic {args.topic}")
    consumer.assign([TopicPartition(args.topic, p, 0) for p in meta.topics[args.topic].partitions])

    # The highest sequence printed per aggregate: every event of a show is on one partition in
    # commit order, so anything at or below it is a repeat.
    seen: dict[str, int] = {}
    last = time.monotonic()
    try:
        while args.idle_secs is None or time.monotonic() - last < args.idle_secs:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                sys.exit(f"kafka: {msg.error()}")
            last = time.monotonic()
            env = json.loads(msg.value())
            row = env["after"]
            if row["aggregate_type"] != "show" or (args.show and row["aggregate_id"] != args.show):
                continue
            if row["sequence"] <= seen.get(row["aggregate_id"], 0):
                continue
            seen[row["aggregate_id"]] = row["sequence"]
            print(json.dumps({
                "show": row["aggregate_id"],
                "sequence": row["sequence"],
                "type": row["event_type"],
                "commitLsn": env["source"]["commitLsn"],
                "committedMs": env["source"]["ts_ms"],
                "event": row["payload"][row["event_type"]],
            }), flush=True)
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
