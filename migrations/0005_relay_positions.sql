-- What the CDC relay has published, per aggregate, and whether a gap is being filled
-- (docs/adr/010). PostgreSQL 15 does not carry logical slots to standbys: after a failover the
-- relay creates its slot on the new primary and republishes every event after these positions
-- from the events table. Positions trail the topic (written after Kafka acknowledged), so the
-- gap fill republishes too much rather than too little; consumers drop the duplicates.
CREATE TABLE relay_positions (
    slot           text   NOT NULL,
    aggregate_type text   NOT NULL,
    aggregate_id   text   NOT NULL,
    sequence       bigint NOT NULL,
    PRIMARY KEY (slot, aggregate_type, aggregate_id)
);

-- A slot created while events may be missing from the topic: the row stays until the gap fill
-- finished, so a relay that dies halfway fills it again when it restarts.
CREATE TABLE relay_gaps (
    slot       text        PRIMARY KEY,
    opened_at  timestamptz NOT NULL DEFAULT now()
);
