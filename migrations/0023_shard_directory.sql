-- The shard directory (docs/adr/021): which write cluster each show's log, ownership and
-- snapshots live on. Written once when the show is scheduled (and again only by a move); it is
-- authoritative in the directory database (the deployment's main DATABASE_URL) and read by
-- every node through a cache. A show with no row was scheduled before the directory existed
-- and lives on shard 1.
CREATE TABLE show_shards (
    show_id   text PRIMARY KEY,
    shard     smallint NOT NULL CHECK (shard >= 1),
    placed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX show_shards_by_shard ON show_shards (shard);

GRANT SELECT, INSERT, UPDATE, DELETE ON show_shards TO onsale_app;
