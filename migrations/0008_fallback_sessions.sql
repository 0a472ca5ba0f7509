-- Sessions admitted while Redis is away (the waiting room's fallback, issue 15): PostgreSQL
-- remembers them so an admission token enters once and a heartbeat renews only a session that
-- exists. Redis-born sessions are not here: during an outage their signed lease stands, never
-- renewed.
CREATE TABLE waiting_room_fallback (
    session_id  text        PRIMARY KEY,
    admission   text        NOT NULL UNIQUE,   -- the admission token's jti: entered once
    show_id     text        NOT NULL,
    account_id  text        NOT NULL,
    lease_until timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX waiting_room_fallback_lapsed ON waiting_room_fallback (lease_until);
