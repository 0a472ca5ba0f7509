-- The read models the projections build from the log (issue 3). Each projection stores, in the
-- same transaction as its rows, the last sequence it applied per show: an event is applied at
-- most once, and a projection can be rebuilt from zero by deleting its rows and positions.

CREATE TABLE projection_positions (
    projection    text   NOT NULL,
    show_id       text   NOT NULL,
    last_sequence bigint NOT NULL,
    applied       bigint NOT NULL,   -- events applied so far: equals last_sequence unless one was applied twice
    PRIMARY KEY (projection, show_id)
);

-- Where each projection reads the topic: stored with its rows, so after a crash it resumes from
-- what it committed (it reads every partition itself, without a consumer group).
CREATE TABLE projection_offsets (
    projection  text    NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (projection, topic, partition)
);

CREATE TABLE projection_status (
    projection   text        PRIMARY KEY,
    lsn          pg_lsn      NOT NULL DEFAULT '0/0',  -- newest commit LSN folded in
    heartbeat_at timestamptz NOT NULL,                -- the projection was alive and caught up to here
    lag_ms       bigint      NOT NULL DEFAULT 0       -- commit-to-apply delay of its last batch
);

-- Seat map: per show its watermark, per section its counts, per seat its public status.
CREATE TABLE seat_map_shows (
    show_id    text        PRIMARY KEY,
    seq        bigint      NOT NULL,   -- last delta published
    lsn        pg_lsn      NOT NULL,   -- newest commit LSN folded in
    updated_at timestamptz NOT NULL
);

CREATE TABLE seat_map_sections (
    show_id   text    NOT NULL,
    ord       integer NOT NULL,
    section   text    NOT NULL,
    total     integer NOT NULL,
    available integer NOT NULL,
    held      integer NOT NULL,
    sold      integer NOT NULL,
    delta_seq bigint,           -- the delta that published the current counts; NULL = pending
    PRIMARY KEY (show_id, section)
);

CREATE TABLE seat_map_seats (
    show_id text    NOT NULL,
    section text    NOT NULL,
    ord     integer NOT NULL,
    seat_id text    NOT NULL,
    status  text    NOT NULL,  -- AVAILABLE or SOLD (pending payment counts as SOLD)
    delta_seq bigint,          -- the delta that published the current status; NULL = pending
    PRIMARY KEY (show_id, section, ord)
);
CREATE INDEX seat_map_seats_pending ON seat_map_seats (show_id) WHERE delta_seq IS NULL;

-- The deltas, coalesced on a ~1 s tick: the sections and seats that changed, absolute values.
CREATE TABLE seat_map_deltas (
    show_id text        NOT NULL,
    seq     bigint      NOT NULL,
    lsn     pg_lsn      NOT NULL,
    at      timestamptz NOT NULL,
    body    jsonb       NOT NULL,   -- {sections:[...], seats:[{seatId, section, status}]}
    PRIMARY KEY (show_id, seq)
);

CREATE TABLE orders_view (
    order_id    text        PRIMARY KEY,
    show_id     text        NOT NULL,
    hold_id     text        NOT NULL,
    account_id  text        NOT NULL,
    status      text        NOT NULL,
    seat_ids    text[]      NOT NULL,
    total_cents bigint      NOT NULL,
    placed_at   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    sequence    bigint      NOT NULL    -- the last event that changed it
);

CREATE TABLE seat_history (
    show_id    text        NOT NULL,
    seat_id    text        NOT NULL,
    sequence   bigint      NOT NULL,
    at         timestamptz NOT NULL,
    type       text        NOT NULL,
    hold_id    text,
    order_id   text,
    account_id text,
    PRIMARY KEY (show_id, seat_id, sequence)
);
