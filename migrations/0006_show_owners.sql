-- Many command nodes (issue 14, docs/adr/011). Each `onsale serve` registers itself and keeps
-- `alive_until` moving (every second, a TTL ahead, on the database's clock); a show is decided
-- by the node of its `show_owners` row. A node claims a show when no live node owns it, which
-- bumps `epoch`; every append carries the epoch it was claimed with and locks the row FOR SHARE
-- in the same statement, so an append of an owner whose show was claimed since (it was paused,
-- or cut off) inserts nothing: the fence. The version check (the events' primary key) stays
-- the last one.
CREATE TABLE nodes (
    node_id     uuid        PRIMARY KEY,
    addr        text        NOT NULL,   -- where its HTTP API answers, for commands forwarded to it
    started_at  timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL
);

CREATE TABLE show_owners (
    show_id    text        PRIMARY KEY,
    node_id    uuid        NOT NULL,
    epoch      bigint      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX show_owners_node ON show_owners (node_id);

-- Holds as `GET /v1/holds/{id}` serves them (the orders projection keeps them): reads never go
-- through a show's owner. The orders projection folds the log again from the start to fill it.
CREATE TABLE holds_view (
    hold_id    text        PRIMARY KEY,
    show_id    text        NOT NULL,
    account_id text        NOT NULL,
    seat_ids   text[]      NOT NULL,
    expires_at timestamptz NOT NULL,
    status     text        NOT NULL,
    sequence   bigint      NOT NULL
);
DELETE FROM projection_positions WHERE projection = 'orders';
DELETE FROM projection_offsets WHERE projection = 'orders';
