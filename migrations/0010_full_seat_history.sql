-- The auditor's full history of a seat (issue 16): each entry from the log keeps when it was
-- committed and at which LSN (when it came through the relay), who did it, and what else it
-- said (a failure's reason, a refund's id, a hold's expiry); tickets keep who scanned them.
-- Entries folded before this migration have none of it until the projections rebuild
-- (`onsale project --rebuild`).
ALTER TABLE seat_history
    ADD COLUMN committed_at timestamptz,
    ADD COLUMN lsn          text,
    ADD COLUMN actor        text,
    ADD COLUMN detail       jsonb;
ALTER TABLE tickets ADD COLUMN scanned_by text;
CREATE INDEX seat_history_by_seat_time ON seat_history (show_id, seat_id, at, sequence);
