-- A cancellation is two steps: the order's tickets are revoked (here), then CancelOrder is
-- recorded in the show's log. The row keeps who cancelled and whether the second step was
-- recorded, so a cancellation interrupted between the two is finished by the jobs (issue 15).
ALTER TABLE ticket_orders
    ADD COLUMN cancelled_by       text,
    ADD COLUMN cancel_recorded_at timestamptz;
-- Cancellations before this migration were recorded (or their orders are in the log).
UPDATE ticket_orders SET cancel_recorded_at = cancelled_at WHERE cancelled_at IS NOT NULL;
CREATE INDEX ticket_orders_unfinished ON ticket_orders (cancelled_at)
    WHERE cancelled_at IS NOT NULL AND cancel_recorded_at IS NULL;
