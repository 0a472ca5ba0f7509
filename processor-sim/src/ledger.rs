//! The processor's books, with no I/O: charges keyed by idempotency key, voids, refunds, the
//! webhook events they raise and the settlement file. Time comes in as an argument, so the HTTP
//! service and property tests drive the same rules.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};

pub use onsale_processor_api::{
    Behaviour, Charge, ChargeRequest, ChargeStatus, Refund, SettlementLine, WebhookEvent,
};

/// A refusal, with the code a real processor would send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    #[error("unknown payment token")]
    InvalidToken,
    #[error("amount must be positive")]
    InvalidAmount,
    #[error("this idempotency key was used with a different request")]
    IdempotencyMismatch,
    #[error("no charge with this key")]
    NoSuchCharge,
    #[error("the charge was not captured")]
    NotCaptured,
    #[error("the charge was already captured")]
    AlreadyCaptured,
    #[error("the refund exceeds what is left of the charge")]
    RefundTooLarge,
}

impl LedgerError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidToken => "invalid_token",
            Self::InvalidAmount => "invalid_amount",
            Self::IdempotencyMismatch => "idempotency_mismatch",
            Self::NoSuchCharge => "no_such_charge",
            Self::NotCaptured => "not_captured",
            Self::AlreadyCaptured => "already_captured",
            Self::RefundTooLarge => "refund_too_large",
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Ledger {
    charges: BTreeMap<String, (ChargeRequest, Charge)>,
    refunds: BTreeMap<String, Refund>,
    outbox: Vec<WebhookEvent>,
    next: u64,
}

impl Ledger {
    fn id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}_{:08}", self.next)
    }

    fn raise(&mut self, kind: &str, c: &Charge, at: DateTime<Utc>) {
        let id = self.id("evt");
        self.outbox.push(WebhookEvent {
            id,
            kind: kind.to_owned(),
            created: at,
            charge_key: c.key.clone(),
            charge_id: c.charge_id.clone(),
            reference: c.reference.clone(),
            status: c.status,
            amount_cents: c.amount_cents,
        });
    }

    /// Creates the charge for `key`, or answers with the one already made under it: a retry
    /// never charges twice, and the same key with another request is refused.
    pub fn charge(
        &mut self,
        key: &str,
        request: ChargeRequest,
        settle_after: Duration,
        now: DateTime<Utc>,
    ) -> Result<Charge, LedgerError> {
        if let Some((original, charge)) = self.charges.get(key) {
            return if *original == request {
                Ok(charge.clone())
            } else {
                Err(LedgerError::IdempotencyMismatch)
            };
        }
        let behaviour = Behaviour::from_token(&request.token).ok_or(LedgerError::InvalidToken)?;
        if request.amount_cents <= 0 {
            return Err(LedgerError::InvalidAmount);
        }
        let (status, captured_at, resolves_at) = match behaviour {
            Behaviour::Ok => (ChargeStatus::Succeeded, Some(now), None),
            Behaviour::Decline => (ChargeStatus::Failed, None, None),
            Behaviour::TimeoutThenOk | Behaviour::TimeoutThenFail => {
                (ChargeStatus::Pending, None, Some(now + settle_after))
            }
            Behaviour::LateSettle => (ChargeStatus::Failed, None, Some(now + settle_after)),
        };
        let charge = Charge {
            charge_id: self.id("ch"),
            key: key.to_owned(),
            reference: request.reference.clone(),
            amount_cents: request.amount_cents,
            behaviour,
            status,
            created_at: now,
            resolves_at,
            captured_at,
            refunded_cents: 0,
        };
        match status {
            ChargeStatus::Succeeded => self.raise("charge.succeeded", &charge, now),
            ChargeStatus::Failed => self.raise("charge.failed", &charge, now),
            _ => self.raise("charge.pending", &charge, now),
        }
        self.charges
            .insert(key.to_owned(), (request, charge.clone()));
        Ok(charge)
    }

    pub fn status(&self, key: &str) -> Option<&Charge> {
        self.charges.get(key).map(|(_, c)| c)
    }

    /// Cancels a charge that has not captured. A captured one is refused (`AlreadyCaptured`),
    /// which tells the caller the money moved; a failed one stays failed.
    pub fn void(&mut self, key: &str, now: DateTime<Utc>) -> Result<Charge, LedgerError> {
        let (_, charge) = self.charges.get_mut(key).ok_or(LedgerError::NoSuchCharge)?;
        match charge.status {
            ChargeStatus::Pending => {
                charge.status = ChargeStatus::Voided;
                charge.resolves_at = None;
                let c = charge.clone();
                self.raise("charge.voided", &c, now);
                Ok(c)
            }
            ChargeStatus::Succeeded | ChargeStatus::Refunded => Err(LedgerError::AlreadyCaptured),
            // A late-settling charge says "failed" and still captures later: voiding it does
            // not stop that (the processor's bug the settlement reconciliation exists for).
            ChargeStatus::Failed | ChargeStatus::Voided => Ok(charge.clone()),
        }
    }

    /// Refunds (part of) a captured charge, once per refund key.
    pub fn refund(
        &mut self,
        key: &str,
        charge_key: &str,
        amount_cents: i64,
        now: DateTime<Utc>,
    ) -> Result<Refund, LedgerError> {
        if let Some(r) = self.refunds.get(key) {
            return if r.charge_key == charge_key && r.amount_cents == amount_cents {
                Ok(r.clone())
            } else {
                Err(LedgerError::IdempotencyMismatch)
            };
        }
        if amount_cents <= 0 {
            return Err(LedgerError::InvalidAmount);
        }
        let (_, charge) = self
            .charges
            .get(charge_key)
            .ok_or(LedgerError::NoSuchCharge)?;
        if charge.captured_at.is_none() {
            return Err(LedgerError::NotCaptured);
        }
        if charge.refunded_cents + amount_cents > charge.amount_cents {
            return Err(LedgerError::RefundTooLarge);
        }
        let reference = charge.reference.clone();
        let refund = Refund {
            refund_id: self.id("re"),
            key: key.to_owned(),
            charge_key: charge_key.to_owned(),
            reference,
            amount_cents,
            at: now,
        };
        let (_, charge) = self
            .charges
            .get_mut(charge_key)
            .ok_or(LedgerError::NoSuchCharge)?;
        charge.refunded_cents += amount_cents;
        if charge.refunded_cents == charge.amount_cents {
            charge.status = ChargeStatus::Refunded;
        }
        let c = charge.clone();
        self.raise("charge.refunded", &c, now);
        self.refunds.insert(key.to_owned(), refund.clone());
        Ok(refund)
    }

    /// Resolves what is due at `now`: pending charges settle (with a webhook), late-settling
    /// ones capture silently.
    pub fn advance(&mut self, now: DateTime<Utc>) {
        let due: Vec<String> = self
            .charges
            .iter()
            .filter(|(_, (_, c))| c.resolves_at.is_some_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some((_, charge)) = self.charges.get_mut(&key) else {
                continue;
            };
            charge.resolves_at = None;
            let kind = match charge.behaviour {
                Behaviour::TimeoutThenOk => {
                    charge.status = ChargeStatus::Succeeded;
                    charge.captured_at = Some(now);
                    Some("charge.succeeded")
                }
                Behaviour::TimeoutThenFail => {
                    charge.status = ChargeStatus::Failed;
                    Some("charge.failed")
                }
                Behaviour::LateSettle => {
                    charge.captured_at = Some(now);
                    None
                }
                Behaviour::Ok | Behaviour::Decline => None,
            };
            let c = charge.clone();
            if let Some(kind) = kind {
                self.raise(kind, &c, now);
            }
        }
    }

    /// Webhook events raised since the last call.
    pub fn take_events(&mut self) -> Vec<WebhookEvent> {
        std::mem::take(&mut self.outbox)
    }

    /// The day's settlement file: every capture and refund whose money moved that day (UTC).
    pub fn settlement(&self, day: NaiveDate) -> Vec<SettlementLine> {
        let mut lines: Vec<SettlementLine> = self
            .charges
            .values()
            .filter_map(|(_, c)| {
                let at = c.captured_at?;
                (at.date_naive() == day).then(|| SettlementLine {
                    kind: "capture".into(),
                    key: c.key.clone(),
                    charge_key: c.key.clone(),
                    reference: c.reference.clone(),
                    amount_cents: c.amount_cents,
                    settled_at: at,
                })
            })
            .chain(
                self.refunds
                    .values()
                    .filter(|r| r.at.date_naive() == day)
                    .map(|r| SettlementLine {
                        kind: "refund".into(),
                        key: r.key.clone(),
                        charge_key: r.charge_key.clone(),
                        reference: r.reference.clone(),
                        amount_cents: r.amount_cents,
                        settled_at: r.at,
                    }),
            )
            .collect();
        lines.sort_by(|a, b| a.settled_at.cmp(&b.settled_at).then(a.key.cmp(&b.key)));
        lines
    }

    pub fn charges(&self) -> impl Iterator<Item = &Charge> {
        self.charges.values().map(|(_, c)| c)
    }

    pub fn refunds(&self) -> impl Iterator<Item = &Refund> {
        self.refunds.values()
    }

    /// Captured charges per merchant reference: the witness that no order was charged twice.
    pub fn captures_per_reference(&self) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for c in self.charges().filter(|c| c.captured_at.is_some()) {
            *out.entry(c.reference.clone()).or_insert(0) += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("time")
    }

    fn req(token: &str) -> ChargeRequest {
        ChargeRequest {
            amount_cents: 5_000,
            token: token.into(),
            reference: "o_1".into(),
        }
    }

    #[test]
    fn a_retry_with_the_key_never_charges_twice_and_another_body_is_refused() {
        let mut l = Ledger::default();
        let a = l
            .charge("k", req("tok_ok"), Duration::seconds(5), t(0))
            .expect("charge");
        let b = l
            .charge("k", req("tok_ok"), Duration::seconds(5), t(1))
            .expect("retry");
        assert_eq!(a.charge_id, b.charge_id);
        assert_eq!(l.captures_per_reference()["o_1"], 1);
        let mut other = req("tok_ok");
        other.amount_cents = 1;
        assert_eq!(
            l.charge("k", other, Duration::seconds(5), t(2)).err(),
            Some(LedgerError::IdempotencyMismatch)
        );
    }

    #[test]
    fn timeouts_resolve_later_with_a_webhook_and_a_void_stops_them() {
        let mut l = Ledger::default();
        l.charge("a", req("tok_timeout_then_ok"), Duration::seconds(5), t(0))
            .expect("a");
        l.charge(
            "b",
            req("tok_timeout_then_fail"),
            Duration::seconds(5),
            t(0),
        )
        .expect("b");
        l.charge("c", req("tok_timeout_then_ok"), Duration::seconds(5), t(0))
            .expect("c");
        l.take_events();
        assert_eq!(
            l.void("c", t(1)).expect("void").status,
            ChargeStatus::Voided
        );
        l.advance(t(5));
        assert_eq!(
            l.status("a").map(|c| c.status),
            Some(ChargeStatus::Succeeded)
        );
        assert_eq!(l.status("b").map(|c| c.status), Some(ChargeStatus::Failed));
        assert_eq!(l.status("c").map(|c| c.status), Some(ChargeStatus::Voided));
        let kinds: Vec<String> = l.take_events().into_iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            ["charge.voided", "charge.succeeded", "charge.failed"]
        );
        assert_eq!(l.void("a", t(6)).err(), Some(LedgerError::AlreadyCaptured));
    }

    #[test]
    fn a_late_settlement_captures_silently_and_shows_in_the_file() {
        let mut l = Ledger::default();
        let c = l
            .charge("k", req("tok_late_settle"), Duration::seconds(5), t(0))
            .expect("k");
        assert_eq!(c.status, ChargeStatus::Failed);
        l.take_events();
        l.advance(t(6));
        assert!(
            l.take_events().is_empty(),
            "the late capture raises no webhook"
        );
        let file = l.settlement(t(6).date_naive());
        assert_eq!(file.len(), 1);
        assert_eq!(file[0].kind, "capture");
        l.refund("r", "k", 5_000, t(7)).expect("refund");
        assert_eq!(l.settlement(t(7).date_naive()).len(), 2);
    }

    #[test]
    fn refunds_are_idempotent_and_bounded_by_the_capture() {
        let mut l = Ledger::default();
        l.charge("k", req("tok_ok"), Duration::seconds(5), t(0))
            .expect("k");
        l.charge("d", req("tok_decline"), Duration::seconds(5), t(0))
            .expect("d");
        let a = l.refund("r", "k", 5_000, t(1)).expect("refund");
        let b = l.refund("r", "k", 5_000, t(2)).expect("retry");
        assert_eq!(a.refund_id, b.refund_id);
        assert_eq!(
            l.refund("r2", "k", 1, t(3)).err(),
            Some(LedgerError::RefundTooLarge)
        );
        assert_eq!(
            l.refund("r3", "d", 1, t(3)).err(),
            Some(LedgerError::NotCaptured)
        );
        assert_eq!(
            l.status("k").map(|c| c.status),
            Some(ChargeStatus::Refunded)
        );
    }
}
