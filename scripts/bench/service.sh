# Sourced by the hold benchmarks (bench-holds.sh, bench-ga.sh): a fresh `onsale serve` per
# configuration and a quiet machine before each layer. Needs BIN, DB, DIR, LISTEN and
# GRPC_LISTEN set by the caller.
#
# Each configuration gets a fresh service process, so one run's show (~125,000 events of lapsed
# 1 s holds, and its snapshots) does not weigh on the next run's measurement (ADR 003). It runs
# BENCH_SERVICE_THREADS tokio workers (1): on two cores shared with wrk and PostgreSQL, a second
# worker mostly adds cross-thread wake-ups (BENCHMARKS.md has both).
start_service() {
  stop_service
  TOKIO_WORKER_THREADS=${BENCH_SERVICE_THREADS:-1} DATABASE_URL=$DB ONSALE_LISTEN=$LISTEN ONSALE_GRPC_LISTEN=$GRPC_LISTEN RUST_LOG=warn \
    "$BIN/onsale" serve >>"$DIR/onsale.log" 2>&1 &
  echo $! >"$DIR/onsale.pid"
  # /healthz: these benchmarks run no relay or projections, so /readyz would say the read path is missing.
  for _ in $(seq 1 100); do curl -fsS "http://$LISTEN/healthz" >/dev/null 2>&1 && return; sleep 0.2; done
  echo "onsale did not start" >&2; exit 1
}
stop_service() {
  if [ -f "$DIR/onsale.pid" ]; then
    kill "$(cat "$DIR/onsale.pid")" 2>/dev/null || true
    rm -f "$DIR/onsale.pid"
    sleep 0.5
  fi
}
# Before each layer: the machine as quiet as for the others. The previous layer's writes are
# vacuumed and checkpointed now, so autovacuum and a checkpoint do not land inside whichever
# layer happens to run next, and only the layer measured is running.
quiesce() {
  psql -qc "VACUUM ANALYZE" -c "CHECKPOINT" "$DB" >/dev/null
}
