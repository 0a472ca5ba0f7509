-- The processes log in as roles that are members of onsale_app and nothing more (issue 53,
-- item 6): they no longer migrate, they wait for `onsale migrate` to have brought the schema to
-- their build's version, so they read which version it is (and change nothing there).
GRANT SELECT ON _sqlx_migrations TO onsale_app;

-- What the default privileges of 0009 gave the app role on tables only the owner writes: which
-- region writes (its first row by `onsale migrate`, every change by `onsale region promote`)
-- and where a placed show lives (a process places a show once; only `onsale shard move`
-- repoints it).
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON regions FROM onsale_app;
REVOKE UPDATE, DELETE, TRUNCATE ON show_shards FROM onsale_app;
