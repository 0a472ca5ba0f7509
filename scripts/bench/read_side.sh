# Sourced by the benchmarks on the whole `make up` stack (bench-holds STACK=1, bench-floor).
# read_side_folded URL: waits (5 minutes at most) until every projection and log consumer is at
# the log's last sequence of every show in the database at URL; says so if it is not.
read_side_folded() {
  local behind
  for _ in $(seq 1 600); do
    behind=$(psql -tAc "SELECT count(*) FROM (SELECT aggregate_id, max(sequence) AS s FROM events GROUP BY 1) e
      JOIN projection_positions p ON p.show_id = e.aggregate_id WHERE p.last_sequence < e.s" "$1")
    [ "$behind" = 0 ] && return
    sleep 0.5
  done
  echo "the read side is still $behind show positions behind" >&2
}
