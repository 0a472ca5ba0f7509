-- The on-sale policies a show has now (issue 18): the admin may change them after scheduling
-- (SalePolicyChanged), so the event page reads them from the catalog projection, not from the
-- schedule. Null until the projection has folded the show.
ALTER TABLE catalog_events ADD COLUMN hold_ttl_seconds integer;
ALTER TABLE catalog_events ADD COLUMN policy jsonb;
