-- The waiting room asks, every tick (issue 18): the seats of a show's orders still paying
-- (SEATS_MAY_RETURN), and whether any payment resolved lately (a processor outage pauses
-- admission).
CREATE INDEX orders_view_pending ON orders_view (show_id) WHERE status = 'PENDING_PAYMENT';
CREATE INDEX payments_resolved ON payments (resolved_at) WHERE resolved_at IS NOT NULL;
CREATE INDEX payments_failing ON payments (state) WHERE state <> 'done' AND last_error IS NOT NULL;
