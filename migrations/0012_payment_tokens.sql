-- Payment tokens leave the log (issue 16): `OrderPlaced` no longer carries the card's token.
-- The edge keeps it here under the order id before the order is decided; the payment intake
-- moves it into the order's payment row and deletes it here; the payment row forgets it when
-- the payment is closed. Rows of orders that were never placed (refused, or a retry answered
-- with the first order) are deleted by the edge, or by the jobs an hour later.
CREATE TABLE payment_tokens (
    order_id   text        PRIMARY KEY,
    token      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_tokens_age ON payment_tokens (created_at);
ALTER TABLE payments ALTER COLUMN token DROP NOT NULL;
-- Orders placed before this migration: their tokens are in the log already; a closed payment
-- forgets its token from now on.
UPDATE payments SET token = NULL WHERE state = 'done';
