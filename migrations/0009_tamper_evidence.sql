-- Tamper evidence (ADR 012). Every event row carries `hash`: SHA-256 over its aggregate's
-- previous hash and its own columns, set at append by a trigger in the appending transaction;
-- `onsale audit verify` recomputes the chain and names the first row that does not match. The
-- row also keeps the id of the transaction that wrote it (`xid`), for analysts.
--
-- What is hashed, in order, each followed by a 0x1f byte: aggregate_type, aggregate_id,
-- sequence (decimal), event_type, event_version, payload and metadata (as written: `json`
-- keeps the text). The first event of an aggregate chains from 32 zero bytes.
ALTER TABLE events
    ADD COLUMN xid  xid8  NOT NULL DEFAULT pg_current_xact_id(),
    ADD COLUMN hash bytea;

CREATE FUNCTION events_row_bytes(e events) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT convert_to(
        e.aggregate_type || chr(31) || e.aggregate_id || chr(31) || e.sequence::text || chr(31)
        || e.event_type || chr(31) || e.event_version || chr(31) || e.payload::text || chr(31)
        || e.metadata::text || chr(31), 'UTF8')
$$;

CREATE FUNCTION events_chain() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    prev bytea;
BEGIN
    -- The owner computes the chain as it appends (eventlog/src/pg.rs) and sends it; a row
    -- written without one (a venue, a tool) is chained here. `audit verify` checks both.
    IF NEW.hash IS NOT NULL THEN
        RETURN NEW;
    END IF;
    -- A volatile trigger sees the rows the same statement inserted before this one.
    SELECT hash INTO prev FROM events
     WHERE aggregate_type = NEW.aggregate_type AND aggregate_id = NEW.aggregate_id
       AND sequence = NEW.sequence - 1;
    NEW.hash := sha256(coalesce(prev, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
                       || events_row_bytes(NEW));
    RETURN NEW;
END
$$;

-- The rows already there are chained once, in order.
DO $$
DECLARE
    r record;
    prev bytea;
    last_type text;
    last_id text;
BEGIN
    FOR r IN SELECT * FROM events ORDER BY aggregate_type, aggregate_id, sequence LOOP
        IF last_type IS DISTINCT FROM r.aggregate_type OR last_id IS DISTINCT FROM r.aggregate_id THEN
            prev := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
        END IF;
        prev := sha256(prev || events_row_bytes(r));
        UPDATE events SET hash = prev
         WHERE aggregate_type = r.aggregate_type AND aggregate_id = r.aggregate_id
           AND sequence = r.sequence;
        last_type := r.aggregate_type;
        last_id := r.aggregate_id;
    END LOOP;
END
$$;

CREATE TRIGGER events_chain BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_chain();

-- The log is append-only, for everyone: an UPDATE, DELETE or TRUNCATE of it is refused (a
-- superuser can still disable the trigger; the chain then shows what changed).
CREATE FUNCTION events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the event log is append-only: % on events refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_append_only();

-- The role the processes act as (`ONSALE_DATABASE_ROLE`, SET ROLE after connecting): no
-- superuser, no DDL; everything on the other tables, and on the log only SELECT and INSERT.
-- Roles are per cluster, and many databases of one cluster may migrate at once.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'onsale_app') THEN
        CREATE ROLE onsale_app NOLOGIN REPLICATION;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;
-- flush_lsn of pg_stat_replication (the relay's durable point) is visible to this role.
DO $$
BEGIN
    IF NOT pg_has_role('onsale_app', 'pg_read_all_stats', 'MEMBER') THEN
        GRANT pg_read_all_stats TO onsale_app;
    END IF;
EXCEPTION WHEN unique_violation OR duplicate_object OR internal_error THEN
    -- Another database of the cluster granted it at the same moment.
    NULL;
END
$$;
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public TO onsale_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO onsale_app;
REVOKE UPDATE, DELETE, TRUNCATE ON events FROM onsale_app;
REVOKE ALL ON _sqlx_migrations FROM onsale_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON TABLES TO onsale_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO onsale_app;
