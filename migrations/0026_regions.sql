-- Regions (docs/adr/024): which region writes, on every write cluster and the main database
-- (every migration runs on each), so the authority replicates with the data it governs. One
-- row per region that has written; exactly one is the writer, under the epoch it became the
-- writer in (1 for the region a deployment started in, one more at every promotion). A node
-- claims a show only on a cluster whose writer is its own region (or that names none yet):
-- a node of a replaced region finds every claim refused even where it can still connect.
CREATE TABLE regions (
    region text PRIMARY KEY,
    writer boolean NOT NULL,
    epoch  bigint NOT NULL CHECK (epoch >= 1),
    since  timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX regions_one_writer ON regions (writer) WHERE writer;

-- Each show's write region, recorded with its shard when it is scheduled and rewritten by a
-- promotion. NULL: placed before regions existed, written by the deployment's writer.
ALTER TABLE show_shards ADD COLUMN region text;

-- The processes read it; the first writer's row and every promotion are written as the
-- schema's owner.
GRANT SELECT ON regions TO onsale_app;
