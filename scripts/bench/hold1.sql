-- The design's guarded-UPDATE acquire for one seat (its SQL; TTL 1 s like the onsale runs).
\set r random(1, 100)
\if :r <= :hot_pct
\set i random(0, 4999)
\else
\set i random(0, 49999)
\endif
UPDATE seats SET status = 'HELD', hold_id = gen_random_uuid(), order_id = NULL,
       hold_expires = now() + interval '1 second', holds_won = holds_won + 1
 WHERE event_id = 1 AND seat_id = :i
   AND (status = 'AVAILABLE' OR (status = 'HELD' AND hold_expires < clock_timestamp()))
RETURNING seat_id, hold_expires;
