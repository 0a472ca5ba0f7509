-- The search index's feed (issue 55, ADR 033). Each query-side process keeps a search index of
-- the catalog in memory and follows this table's changes: a row is a show's document, and
-- `written` is the transaction that last changed what the index holds of it (its facts, or its
-- band of seats left), so an index reads every row written by a transaction that has finished
-- since its last read, in any order, and nothing twice but what changed again.
-- The band of seats left: 0 when none is available (SOLD_OUT), else the tenths of the show
-- still available, rounded up (1-10). The index holds the band, not the count: a hold that
-- leaves the band as it was changes nothing there.
CREATE FUNCTION onsale_seats_band(available integer, seats integer) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN available <= 0 OR seats <= 0 THEN 0
                ELSE least(10, greatest(1, ceil(10.0 * available / seats)))::smallint END;

-- The band a show moves to when `available` of `seats` are left and its band was `band`: a move
-- to a neighbouring band is not taken while the count stays within 1% of the seats of the
-- boundary between them, so a count hovering at a boundary (holds made and lapsing) does not
-- rewrite the document at every batch; none left (0) and back from none are taken at once.
CREATE FUNCTION onsale_seats_band_after(band smallint, available integer, seats integer)
    RETURNS smallint LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN available <= 0 OR band <= 0 THEN onsale_seats_band(available, seats)
        WHEN abs(onsale_seats_band(available, seats) - band) = 1
             AND abs(available - least(onsale_seats_band(available, seats), band) * seats / 10.0)
                 < seats / 100.0
            THEN band
        ELSE onsale_seats_band(available, seats) END;

ALTER TABLE catalog_events
    ADD COLUMN seats_band smallint NOT NULL DEFAULT 10,
    ADD COLUMN written xid8 NOT NULL DEFAULT pg_current_xact_id();
UPDATE catalog_events SET seats_band = onsale_seats_band(available, seats);
CREATE INDEX catalog_events_written ON catalog_events (written);
