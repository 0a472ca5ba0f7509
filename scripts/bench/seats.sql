-- The design's seats table and its guarded acquire (design.md §3.1), one 50,000-seat show, plus a
-- holds_won counter so the baseline's successful holds can be counted afterwards.
DROP TABLE IF EXISTS seats;
CREATE TABLE seats (
    event_id     int         NOT NULL,
    seat_id      int         NOT NULL,
    status       text        NOT NULL DEFAULT 'AVAILABLE',
    hold_id      uuid,
    hold_expires timestamptz,
    order_id     uuid,
    holds_won    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (event_id, seat_id)
);
INSERT INTO seats (event_id, seat_id) SELECT 1, g FROM generate_series(0, 49999) g;
VACUUM ANALYZE seats;
