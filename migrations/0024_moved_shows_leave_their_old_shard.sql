-- Moving a show between shards (docs/adr/022). The show's old shard keeps a tombstone owner
-- for it (the `nodes` row of the "moved" node, alive forever, reachable nowhere): every claim
-- there finds the show owned elsewhere and every append of an old owner is fenced. Once the
-- copy on the new shard is verified, its rows on the old shard are removed: the one DELETE the
-- append-only log allows, and only of a show fenced as moved (the processes' role still has no
-- DELETE on the log at all; the move runs as the owner of the schema).
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND OLD.aggregate_type = 'show' AND EXISTS (
        SELECT 1 FROM show_owners
         WHERE show_id = OLD.aggregate_id
           AND node_id = '00000000-0000-0000-0000-6d6f76656421') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the event log is append-only: % on events refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
