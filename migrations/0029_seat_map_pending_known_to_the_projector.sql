-- The seat map's pending seats (changed, not yet in a delta) are known to the projection that
-- changed them, and found by a scan of the show's seats once after a projection loads the show
-- (projections/src/seat_map.rs): no index on them. The partial index made each seat's change and
-- each delta write index entries again (a change of `delta_seq` touches its predicate), and kept
-- every update off the page (no HOT). Room on each page for a row's next version: fillfactor 80
-- (pages written from now on).
DROP INDEX IF EXISTS seat_map_seats_pending;
ALTER TABLE seat_map_seats SET (fillfactor = 80);
