-- The design's general-admission counter (design.md §8.3), as SQL: a guarded decrement of the
-- buyer's bucket of K, and the hold recorded in the same statement. The floor is large enough
-- never to run out in a run, so only the contention on the counter rows is measured.
\set b random(1, :buckets)
WITH won AS (
  UPDATE ga_buckets SET available = available - :qty
   WHERE event_id = 1 AND bucket = :b AND available >= :qty
  RETURNING bucket)
INSERT INTO ga_holds (event_id, bucket, quantity, expires_at)
SELECT 1, bucket, :qty, now() + interval '1 second' FROM won;
