//! Money in the simulation. The processor is the processor simulator's own books
//! ([`Ledger`]: idempotency keys, pending charges that settle late, voids, refunds, webhook
//! events; the rules its HTTP service runs) behind switchable faults (an answer lost after the
//! processor acted). The payment worker is its rules from `onsale-payments`: the charge's key
//! ([`charge_key`]), what a charge's state means ([`ProcessorClient::verdict`]), what to do next
//! ([`next_step`]), the command an outcome or a webhook records (`Outcome::into_command`,
//! `webhook_command`); its work list, which the worker keeps in PostgreSQL, is kept here in
//! memory, filled as the intake fills it (an order placed: a payment; a cancellation or a
//! make-good in the log: a refund).

use std::collections::BTreeMap;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, NaiveDate, Utc};
use onsale_domain::{Clock, OrderId};
use onsale_payments::client::{Processor, ProcessorClient, Verdict, WebhookRejection};
use onsale_payments::worker::{charge_key, next_step, PaymentState, Step};
use onsale_processor_sim::ledger::{
    ChargeRequest, Ledger, LedgerError, Refund, SettlementLine, WebhookEvent,
};

/// Past this, an unresolved payment fails its order and its charge is voided (the worker's
/// `max_pending_secs`).
pub const BOUND_SECS: u64 = 30;

/// The cards fans pay with: the processor simulator's behaviours, by token (a late-settling
/// card reports failed and captures later: only the settlement reconciliation finds it).
pub const CARDS: [&str; 5] = [
    "tok_ok",
    "tok_decline",
    "tok_timeout_then_ok",
    "tok_timeout_then_fail",
    "tok_late_settle",
];

/// One order's payment, where the worker has it.
#[derive(Debug, Clone)]
pub struct Payment {
    pub order: OrderId,
    pub amount: i64,
    pub card: &'static str,
    pub settle_after: Duration,
    pub state: PaymentState,
    pub placed_at: DateTime<Utc>,
    pub attempts: i32,
    pub done: bool,
    /// A worker has it now (the lease).
    pub busy: bool,
}

/// A refund owed (a cancelled order, or a capture that came too late: a make-good).
#[derive(Debug, Clone, Default)]
pub struct RefundJob {
    pub done: bool,
    pub busy: bool,
}

/// The processor and the worker's list.
#[derive(Debug, Default)]
pub struct Money {
    pub ledger: Ledger,
    /// The next processor answers are lost after it acted (a timeout, to the worker).
    pub lose_answers: u32,
    pub payments: BTreeMap<OrderId, Payment>,
    pub refunds: BTreeMap<OrderId, RefundJob>,
    /// Webhook events raised and not yet delivered.
    pub webhooks: Vec<WebhookEvent>,
}

impl Money {
    /// One call to the processor for `order`'s payment in its current state, as the worker
    /// makes it: what the worker hears.
    pub fn call(&mut self, order: OrderId, now: DateTime<Utc>) -> Option<(PaymentState, Verdict)> {
        let p = self.payments.get_mut(&order)?;
        p.attempts += 1;
        let (state, attempts, reference) = (p.state, p.attempts, order.to_string());
        let request = ChargeRequest {
            amount_cents: p.amount,
            token: p.card.to_owned(),
            reference: reference.clone(),
        };
        let settle_after = p.settle_after;
        let heard = match state {
            PaymentState::Charge => {
                let key = charge_key(&reference, attempts);
                match self.ledger.charge(&key, request, settle_after, now) {
                    Ok(c) => ProcessorClient::verdict(&c),
                    Err(e) => Verdict::Unknown { why: e.to_string() },
                }
            }
            PaymentState::Unknown => self.status(&reference),
            PaymentState::Void => match self.ledger.void(&reference, now) {
                Ok(c) => ProcessorClient::verdict(&c),
                // The money moved: the worker asks for the charge.
                Err(LedgerError::AlreadyCaptured) => self.status(&reference),
                Err(LedgerError::NoSuchCharge) => Verdict::NoCharge,
                Err(e) => Verdict::Unknown { why: e.to_string() },
            },
            PaymentState::Done => return None,
        };
        let heard = if self.lose_answers > 0 {
            self.lose_answers -= 1;
            Verdict::Unknown {
                why: "no answer within the charge timeout".into(),
            }
        } else {
            heard
        };
        Some((state, heard))
    }

    pub fn status(&self, key: &str) -> Verdict {
        self.ledger
            .status(key)
            .map_or(Verdict::NoCharge, ProcessorClient::verdict)
    }

    /// What the worker does after hearing `verdict` for `order` at `now`.
    pub fn next(
        &self,
        order: OrderId,
        state: PaymentState,
        verdict: &Verdict,
        now: DateTime<Utc>,
    ) -> Step {
        let placed = self.payments.get(&order).map_or(now, |p| p.placed_at);
        next_step(state, verdict, (now - placed).num_seconds(), BOUND_SECS)
    }

    /// The refund owed for `order`, as the worker asks for it: the whole charge, once (the
    /// refund's key is the order's).
    pub fn refund(&mut self, order: OrderId, now: DateTime<Utc>) -> Result<String, String> {
        let reference = order.to_string();
        let amount = self
            .ledger
            .status(&reference)
            .map(|c| c.amount_cents)
            .ok_or("no charge to refund")?;
        self.ledger
            .refund(&format!("refund-{reference}"), &reference, amount, now)
            .map(|r| r.refund_id)
            .map_err(|e| e.to_string())
    }

    /// Captures per order at the processor: more than one is a card charged twice.
    pub fn charged_twice(&self) -> Option<(String, u32)> {
        self.ledger
            .captures_per_reference()
            .into_iter()
            .find(|(_, n)| *n > 1)
    }
}

/// The processor as the settlement reconciliation (`onsale_payments::reconcile`) reaches it:
/// the same books, through the `Processor` trait the HTTP client implements.
#[derive(Debug, Clone)]
pub struct SimProcessor {
    pub money: Arc<Mutex<Money>>,
    pub clock: Arc<dyn Clock>,
}

impl SimProcessor {
    fn money(&self) -> std::sync::MutexGuard<'_, Money> {
        self.money.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait::async_trait]
impl Processor for SimProcessor {
    async fn charge(&self, key: &str, request: &ChargeRequest) -> Verdict {
        let now = self.clock.now();
        match self
            .money()
            .ledger
            .charge(key, request.clone(), Duration::seconds(30), now)
        {
            Ok(c) => ProcessorClient::verdict(&c),
            Err(e) => Verdict::Unknown { why: e.to_string() },
        }
    }

    async fn status(&self, key: &str) -> Verdict {
        self.money().status(key)
    }

    async fn void(&self, key: &str) -> Verdict {
        let now = self.clock.now();
        let mut money = self.money();
        match money.ledger.void(key, now) {
            Ok(c) => ProcessorClient::verdict(&c),
            Err(LedgerError::AlreadyCaptured) => money.status(key),
            Err(LedgerError::NoSuchCharge) => Verdict::NoCharge,
            Err(e) => Verdict::Unknown { why: e.to_string() },
        }
    }

    async fn refund(
        &self,
        key: &str,
        charge_key: &str,
        amount_cents: i64,
    ) -> anyhow::Result<Refund> {
        let now = self.clock.now();
        Ok(self
            .money()
            .ledger
            .refund(key, charge_key, amount_cents, now)?)
    }

    async fn settlement(&self, day: NaiveDate) -> anyhow::Result<Vec<SettlementLine>> {
        Ok(self.money().ledger.settlement(day))
    }

    fn verify_webhook(
        &self,
        _signature: &str,
        body: &[u8],
        _now: i64,
    ) -> Result<WebhookEvent, WebhookRejection> {
        // Deliveries reach the simulation as events, never as signed bodies.
        Ok(serde_json::from_slice(body)?)
    }
}
