-- The invariant monitor reads the sweeper's lag every round (issue 17's alerts): the holds
-- still active, by expiry, without scanning every hold ever made.
CREATE INDEX holds_view_active_expiry ON holds_view (expires_at) WHERE status = 'ACTIVE';
