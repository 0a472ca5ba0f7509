-- The catalog's search projection (issue 16, ADR 013): one row per scheduled show, fed from the
-- log like every read model, with what a fan filters on and searches in. Full text on the
-- performer and the show's name (weight A) and the venue and city (weight C), and trigram
-- word similarity on the performer and name for typos ("metalica", "beyonse").
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE catalog_events (
    event_id        text        PRIMARY KEY,
    name            text        NOT NULL,
    performer       text        NOT NULL,
    venue_id        text        NOT NULL,
    venue_name      text        NOT NULL,
    city            text        NOT NULL,
    starts_at       timestamptz NOT NULL,
    on_sale_at      timestamptz NOT NULL,
    min_price_cents bigint      NOT NULL,
    max_price_cents bigint      NOT NULL,
    waiting_room    boolean     NOT NULL,
    seats           integer     NOT NULL,
    available       integer     NOT NULL,
    search          tsvector    GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', performer || ' ' || name), 'A')
        || setweight(to_tsvector('simple', venue_name || ' ' || city), 'C')) STORED,
    words           text        GENERATED ALWAYS AS (lower(performer || ' ' || name)) STORED
);
-- fastupdate off: a row goes into the index as it is written (one per show scheduled, rare)
-- instead of a pending list every search would scan (4 ms of 5 on 20,000 shows, measured).
CREATE INDEX catalog_events_search ON catalog_events USING gin (search) WITH (fastupdate = off);
CREATE INDEX catalog_events_words ON catalog_events USING gin (words gin_trgm_ops) WITH (fastupdate = off);
CREATE INDEX catalog_events_city ON catalog_events (lower(city), starts_at, event_id);
CREATE INDEX catalog_events_starts ON catalog_events (starts_at, event_id);
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON catalog_events TO onsale_app;
