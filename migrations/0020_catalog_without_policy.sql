-- The policies in force are read from the log (the show's last SalePolicyChanged, migration
-- 0019), by the event page and the waiting room alike, so a change is read back at once; the
-- catalog projection no longer keeps a copy that could lag.
ALTER TABLE catalog_events DROP COLUMN hold_ttl_seconds, DROP COLUMN policy;
