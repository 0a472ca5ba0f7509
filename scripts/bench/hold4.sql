-- The design's multi-seat acquire: ordered FOR UPDATE, then the guarded UPDATE over four
-- adjacent seats in one row. pgbench cannot roll back on a short row count, so unlike onsale
-- this baseline is not all-or-none (it does less work than onsale, never more).
\set r random(1, 100)
\if :r <= :hot_pct
\set i random(0, 4999)
\else
\set i random(0, 49999)
\endif
\set s (:i / 50) * 50 + least(:i % 50, 46)
BEGIN;
SELECT seat_id FROM seats WHERE event_id = 1 AND seat_id BETWEEN :s AND :s + 3 ORDER BY seat_id FOR UPDATE;
UPDATE seats SET status = 'HELD', hold_id = gen_random_uuid(), order_id = NULL,
       hold_expires = now() + interval '1 second', holds_won = holds_won + 1
 WHERE event_id = 1 AND seat_id BETWEEN :s AND :s + 3
   AND (status = 'AVAILABLE' OR (status = 'HELD' AND hold_expires < clock_timestamp()))
RETURNING seat_id, hold_expires;
COMMIT;
