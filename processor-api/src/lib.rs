//! The card processor's HTTP contract, as onsale's payment worker calls it and the local
//! simulator serves it: the request and answer bodies, the webhook events, the settlement
//! file's lines, the test cards of docs/api.md and the webhook signature scheme. No I/O.

pub mod signature;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a test card does, chosen by its token (docs/api.md, "Test payment tokens").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Captured at once.
    Ok,
    /// Declined at once.
    Decline,
    /// The call hangs past the caller's patience; the charge settles as captured later.
    TimeoutThenOk,
    /// The call hangs; the charge is reported failed later.
    TimeoutThenFail,
    /// Reported declined at once, then captured at settlement anyway (no webhook says so).
    LateSettle,
}

impl Behaviour {
    pub fn from_token(token: &str) -> Option<Self> {
        Some(match token {
            "tok_ok" => Self::Ok,
            "tok_decline" => Self::Decline,
            "tok_timeout_then_ok" => Self::TimeoutThenOk,
            "tok_timeout_then_fail" => Self::TimeoutThenFail,
            "tok_late_settle" => Self::LateSettle,
            _ => return None,
        })
    }

    /// The charge call does not answer in time.
    pub fn hangs(self) -> bool {
        matches!(self, Self::TimeoutThenOk | Self::TimeoutThenFail)
    }
}

/// What the processor's API says about a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeStatus {
    Pending,
    Succeeded,
    Failed,
    Voided,
    Refunded,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChargeRequest {
    pub amount_cents: i64,
    pub token: String,
    /// The merchant's reference: onsale's order id.
    pub reference: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    pub charge_id: String,
    pub key: String,
    pub reference: String,
    pub amount_cents: i64,
    pub behaviour: Behaviour,
    pub status: ChargeStatus,
    pub created_at: DateTime<Utc>,
    /// When a pending charge resolves (or a late-settling one captures).
    pub resolves_at: Option<DateTime<Utc>>,
    /// When the money moved; at most once per charge.
    pub captured_at: Option<DateTime<Utc>>,
    pub refunded_cents: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    pub refund_id: String,
    pub key: String,
    pub charge_key: String,
    pub reference: String,
    pub amount_cents: i64,
    pub at: DateTime<Utc>,
}

/// A webhook event: the same `id` on every delivery of it (deduplicate on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub created: DateTime<Utc>,
    pub charge_key: String,
    pub charge_id: String,
    pub reference: String,
    pub status: ChargeStatus,
    pub amount_cents: i64,
}

/// One line of a settlement file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlementLine {
    /// `capture` or `refund`.
    pub kind: String,
    pub key: String,
    pub charge_key: String,
    pub reference: String,
    pub amount_cents: i64,
    pub settled_at: DateTime<Utc>,
}
