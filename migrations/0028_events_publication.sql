-- The relay streams the log through a replication session (docs/adr/028): pgoutput sends the
-- changes of the tables a publication names, here inserts into the events table alone (the log
-- is append-only; the read models' writes and every other table's are never sent).
CREATE PUBLICATION onsale_events FOR TABLE events WITH (publish = 'insert');
