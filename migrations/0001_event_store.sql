-- The event store, in postgres-es's schema so its repository can read what onsale writes.
-- The primary key is the version check: a second writer appending the same sequence for the
-- same aggregate fails with 23505 and must reload.
CREATE TABLE events (
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    sequence       bigint CHECK (sequence >= 0) NOT NULL,
    event_type     text   NOT NULL,
    event_version  text   NOT NULL,
    payload        json   NOT NULL,
    metadata       json   NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, sequence)
);

CREATE TABLE snapshots (
    aggregate_type   text   NOT NULL,
    aggregate_id     text   NOT NULL,
    last_sequence    bigint CHECK (last_sequence >= 0) NOT NULL,
    current_snapshot bigint CHECK (current_snapshot >= 0) NOT NULL,
    payload          json   NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id, last_sequence)
);
