#!/usr/bin/env python3
"""Reads an `onsale export` directory with DuckDB and prints, per show, the events exported and
the seats sold (seats of orders whose last outcome is a captured payment or a late capture's
reinstatement; a cancellation, a compensation or a failure releases them), one JSON object.

    python3 export/examples/seats_sold.py DIR            # DIR holds events-*.parquet or *.ndjson
"""
import json
import sys

import duckdb

QUERY = """
WITH events AS (SELECT * FROM {source}),
orders AS (
    SELECT show_id, order_id,
           arg_max(event_type, sequence) FILTER (WHERE event_type IN
               ('OrderPlaced', 'PaymentSucceeded', 'PaymentFailed', 'OrderCompensated',
                'OrderReinstated', 'OrderCancelled')) AS outcome,
           arg_max(seat_ids, sequence) FILTER (WHERE event_type IN
               ('OrderPlaced', 'OrderReinstated')) AS seats
      FROM events WHERE order_id IS NOT NULL GROUP BY ALL),
sold AS (
    SELECT show_id, sum(len(seats)) AS sold FROM orders
     WHERE outcome IN ('PaymentSucceeded', 'OrderReinstated') GROUP BY ALL)
SELECT e.show_id::VARCHAR AS show_id, count(*) AS events, max(e.sequence) AS head, coalesce(any_value(s.sold), 0) AS sold
  FROM events e LEFT JOIN sold s USING (show_id)
 GROUP BY e.show_id ORDER BY e.show_id
"""


def main(directory: str) -> None:
    manifest = json.load(open(f"{directory}/manifest.json"))
    files = [f"{directory}/{f['name']}" for f in manifest["files"]]
    if not files:
        print("{}")
        return
    reader = "read_parquet" if manifest["format"] == "parquet" else "read_json_auto"
    source = f"{reader}({files!r})"
    rows = duckdb.sql(QUERY.format(source=source)).fetchall()
    print(json.dumps({show: {"events": n, "head": head, "sold": int(sold)}
                      for show, n, head, sold in rows}))


if __name__ == "__main__":
    main(sys.argv[1])
