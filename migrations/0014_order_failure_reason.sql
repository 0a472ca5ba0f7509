-- Why a failed order failed, as a code a client can act on (CARD_DECLINED, PAYMENT_TIMED_OUT,
-- FAILED): `GET /v1/orders/{id}` says so, and the fan app tells a declined card from a
-- processor that never answered. Null while the order is not FAILED.
ALTER TABLE orders_view ADD COLUMN failure_reason text;
