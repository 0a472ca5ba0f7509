-- Payments after the commit, tickets and reconciliation (issue 4).

-- The payment worker's work list, filled from `OrderPlaced` on the log (the event is the
-- outbox: it exists iff the order committed) and closed by the outcome's event. `key` is the
-- processor's idempotency key: the order id, on every attempt.
CREATE TABLE payments (
    order_id      text        PRIMARY KEY,
    show_id       text        NOT NULL,
    amount_cents  bigint      NOT NULL,
    token         text        NOT NULL,
    -- charge: call the processor; unknown: ask its status; void: the ambiguity bound passed,
    -- void the charge; done: the outcome is in the log.
    state         text        NOT NULL,
    placed_at     timestamptz NOT NULL,
    due_at        timestamptz NOT NULL,
    lease_until   timestamptz,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    -- The order was declared failed at the ambiguity bound; the void is still owed.
    forced_at     timestamptz,
    resolved_at   timestamptz
);
CREATE INDEX payments_due ON payments (due_at) WHERE state <> 'done';

-- Refunds owed: a cancellation or a make-good. The key is `refund-<order id>`.
CREATE TABLE refunds (
    order_id     text        PRIMARY KEY,
    show_id      text        NOT NULL,
    amount_cents bigint      NOT NULL,
    reason       text        NOT NULL,     -- cancelled | make_good
    state        text        NOT NULL,     -- due | done
    due_at       timestamptz NOT NULL,
    lease_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    refund_id    text,
    created_at   timestamptz NOT NULL,
    resolved_at  timestamptz
);
CREATE INDEX refunds_due ON refunds (due_at) WHERE state <> 'done';

-- Webhook deliveries already applied: a re-delivery with the same id is acknowledged only.
CREATE TABLE webhook_deliveries (
    delivery_id text        PRIMARY KEY,
    kind        text        NOT NULL,
    charge_key  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- Per order, the row that serializes ticket issuance against cancellation (both lock it).
CREATE TABLE ticket_orders (
    order_id     text        PRIMARY KEY,
    show_id      text        NOT NULL,
    cancelled_at timestamptz
);

-- One ticket per (order, seat), enforced by the store: issuing twice is a no-op.
CREATE TABLE tickets (
    ticket_id  uuid        PRIMARY KEY,
    order_id   text        NOT NULL,
    show_id    text        NOT NULL,
    seat_id    text        NOT NULL,
    account_id text        NOT NULL,
    secret     bytea       NOT NULL,    -- the barcode key, never leaves the server
    issued_at  timestamptz NOT NULL,
    revoked_at timestamptz,
    scanned_at timestamptz,
    UNIQUE (order_id, seat_id)
);
CREATE INDEX tickets_by_seat ON tickets (show_id, seat_id);

-- Settlement reconciliation runs and what they found.
CREATE TABLE reconciliation_runs (
    id          bigserial   PRIMARY KEY,
    day         date        NOT NULL,
    ran_at      timestamptz NOT NULL DEFAULT now(),
    mismatches  integer     NOT NULL,   -- what is still unresolved after the run
    report      jsonb       NOT NULL
);

ALTER TABLE orders_view ADD COLUMN make_good boolean NOT NULL DEFAULT false;
