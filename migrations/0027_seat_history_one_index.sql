-- The seat history keeps one index, its primary key (show_id, seat_id, sequence): a seat's page
-- (projections::history::seat_page) reads the seat's rows by that prefix and orders them by
-- time itself (a seat has tens of entries, hundreds at most). The second index, on
-- (show_id, seat_id, at, sequence), cost the projector's PostgreSQL backends a sixth of their
-- CPU under load (BENCHMARKS.md, issue 30: 0.26 -> 0.21-0.22 cores at 4,500 holds/s).
DROP INDEX IF EXISTS seat_history_by_seat_time;
