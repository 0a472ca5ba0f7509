-- A show's snapshot is several megabytes of JSON; lz4 TOAST compression costs a fraction of the
-- default pglz's CPU, which matters because snapshots are written during an on-sale.
ALTER TABLE snapshots ALTER COLUMN payload SET COMPRESSION lz4;
