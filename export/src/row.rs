//! One row of the export per event: where it is in the log, when it was committed, by which
//! transaction, who did it, and the payload's fields as typed columns (a field an event does
//! not have is null). Card tokens never appear: the payload is read through the domain's
//! event type, which has none (orders placed before they left the log keep theirs in the
//! stored JSON only, and it is dropped here).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use onsale_domain::{AccountId, Actor, HoldId, ShowEvent};
use serde::Serialize;
use sha2::Sha256;

/// How account ids are written.
#[derive(Clone)]
pub enum Accounts {
    /// `anon-` and 32 hex digits of HMAC-SHA256 under a key kept by the operator: the same
    /// account has the same pseudonym in every export made with the key, and nobody without
    /// the key can tell whose it is or test a guess.
    Pseudonymized(Vec<u8>),
    /// As they are (an admin's explicit choice, recorded in the manifest).
    Raw,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mode())
    }
}

impl Accounts {
    /// What the manifest says of the account ids.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Pseudonymized(_) => "pseudonymized (HMAC-SHA256, keyed)",
            Self::Raw => "raw",
        }
    }

    /// Which key made the pseudonyms, for the manifest: 16 hex digits of HMAC-SHA256 of a
    /// fixed label under it (the key itself cannot be read back from it); `None` for raw ids.
    pub fn key_id(&self) -> Option<String> {
        match self {
            Self::Raw => None,
            Self::Pseudonymized(key) => {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                    .expect("HMAC takes keys of any length");
                mac.update(b"onsale pseudonym key id");
                Some(hex::encode(&mac.finalize().into_bytes()[..8]))
            }
        }
    }

    pub fn name(&self, account: &AccountId) -> String {
        match self {
            Self::Raw => account.to_string(),
            Self::Pseudonymized(key) => {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                    .expect("HMAC takes keys of any length");
                mac.update(account.to_string().as_bytes());
                let tag = mac.finalize().into_bytes();
                format!("anon-{}", hex::encode(&tag[..16]))
            }
        }
    }

    fn actor(&self, actor: Actor) -> String {
        match actor {
            Actor::Account(a) => self.name(&a),
            Actor::System(s) => s.to_owned(),
        }
    }
}

pub use onsale_eventlog::scan::Stored;

/// One exported event: every column in both formats, null where the event has no such field.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Row {
    pub show_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    pub committed_at: DateTime<Utc>,
    pub xid: i64,
    pub actor: Option<String>,
    pub account_id: Option<String>,
    pub hold_id: Option<String>,
    pub order_id: Option<String>,
    pub seat_ids: Option<Vec<String>>,
    pub taken_seat_ids: Option<Vec<String>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub best_available: Option<bool>,
    pub total_cents: Option<i64>,
    pub reason: Option<String>,
    pub refund_id: Option<String>,
    /// When the event says it happened (an order's placement, a payment's outcome).
    pub event_at: Option<DateTime<Utc>>,
    pub venue_id: Option<String>,
    pub venue_name: Option<String>,
    pub city: Option<String>,
    pub show_name: Option<String>,
    pub performer: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub on_sale_at: Option<DateTime<Utc>>,
    pub hold_ttl_seconds: Option<i64>,
    pub waiting_room: Option<bool>,
    /// Cents per price tier, as JSON.
    pub prices: Option<String>,
    /// The venue's sections, rows and seats when the show was scheduled, as JSON.
    pub layout: Option<String>,
    /// The on-sale policies as scheduled or changed, as JSON.
    pub policy: Option<String>,
}

/// Turns one show's events into rows, in log order; remembers the accounts of live holds so
/// a release names who released it. Holds from before an export's `--from` are not known:
/// such a release has no actor.
#[derive(Debug)]
pub struct Typer {
    accounts: Accounts,
    show: String,
    holds: HashMap<HoldId, AccountId>,
}

impl Typer {
    pub fn new(accounts: Accounts) -> Self {
        Self {
            accounts,
            show: String::new(),
            holds: HashMap::new(),
        }
    }

    pub fn row(&mut self, stored: Stored) -> anyhow::Result<Row> {
        let event: ShowEvent = serde_json::from_str(&stored.payload).map_err(|e| {
            anyhow::anyhow!(
                "event {} of show {} does not decode: {e}",
                stored.sequence,
                stored.show_id
            )
        })?;
        if stored.show_id != self.show {
            self.show.clone_from(&stored.show_id);
            self.holds.clear();
        }
        let hold_account = self.hold_account(&event);
        let actor = event
            .actor(hold_account.as_ref())
            .map(|a| self.accounts.actor(a));
        let mut row = Row {
            show_id: stored.show_id,
            sequence: stored.sequence,
            event_type: stored.event_type,
            event_version: stored.event_version,
            committed_at: stored.committed_at,
            xid: stored.xid,
            actor,
            hold_id: event.hold_id().map(|h| h.to_string()),
            order_id: event.order_id().map(|o| o.to_string()),
            ..Row::default()
        };
        self.fill(&mut row, event, hold_account)?;
        Ok(row)
    }

    /// The hold's account when `event` ends a hold (remembered from the hold's own event in
    /// this show's run of rows).
    fn hold_account(&mut self, event: &ShowEvent) -> Option<AccountId> {
        match event {
            ShowEvent::SeatsHeld {
                hold_id,
                account_id,
                ..
            } => {
                self.holds.insert(*hold_id, account_id.clone());
                None
            }
            ShowEvent::HoldReleased { hold_id }
            | ShowEvent::HoldExpired { hold_id }
            | ShowEvent::OrderPlaced { hold_id, .. } => self.holds.remove(hold_id),
            _ => None,
        }
    }

    /// The typed columns of `event`'s payload.
    fn fill(
        &self,
        row: &mut Row,
        event: ShowEvent,
        hold_account: Option<AccountId>,
    ) -> anyhow::Result<()> {
        match event {
            ShowEvent::ShowScheduled { info, layout } => scheduled(row, info, &layout)?,
            ShowEvent::SalePolicyChanged {
                hold_ttl_seconds,
                policy,
                at,
            } => {
                row.hold_ttl_seconds = Some(i64::from(hold_ttl_seconds));
                row.policy = Some(serde_json::to_string(&policy)?);
                row.event_at = Some(at);
            }
            ShowEvent::SeatsHeld {
                account_id,
                seat_ids,
                expires_at,
                best_available,
                ..
            } => {
                row.account_id = Some(self.accounts.name(&account_id));
                row.seat_ids = seats(&seat_ids);
                row.expires_at = Some(expires_at);
                row.best_available = Some(best_available);
            }
            ShowEvent::HoldReleased { .. } | ShowEvent::HoldExpired { .. } => {
                row.account_id = hold_account.map(|a| self.accounts.name(&a));
            }
            ShowEvent::OrderPlaced {
                account_id,
                seat_ids,
                total_cents,
                placed_at,
                ..
            } => {
                row.account_id = Some(self.accounts.name(&account_id));
                row.seat_ids = seats(&seat_ids);
                row.total_cents = Some(total_cents);
                row.event_at = Some(placed_at);
            }
            ShowEvent::PaymentSucceeded { at, .. } => row.event_at = Some(at),
            ShowEvent::PaymentFailed { reason, at, .. }
            | ShowEvent::PaymentAmbiguous { reason, at, .. } => {
                row.reason = Some(reason);
                row.event_at = Some(at);
            }
            ShowEvent::OrderCompensated { seat_ids, at, .. }
            | ShowEvent::OrderReinstated { seat_ids, at, .. } => {
                row.seat_ids = seats(&seat_ids);
                row.event_at = Some(at);
            }
            ShowEvent::MakeGoodOwed {
                taken_seat_ids,
                reason,
                at,
                ..
            } => {
                row.taken_seat_ids = seats(&taken_seat_ids);
                row.reason = Some(reason);
                row.event_at = Some(at);
            }
            ShowEvent::OrderCancelled {
                seat_ids, by, at, ..
            } => {
                row.seat_ids = seats(&seat_ids);
                row.account_id = Some(self.accounts.name(&by));
                row.event_at = Some(at);
            }
            ShowEvent::OrderRefunded { refund_id, at, .. } => {
                row.refund_id = Some(refund_id);
                row.event_at = Some(at);
            }
        }
        Ok(())
    }
}

/// The seat ids as the export writes them.
fn seats(s: &[onsale_domain::SeatId]) -> Option<Vec<String>> {
    Some(s.iter().map(ToString::to_string).collect())
}

/// A scheduled show's columns.
fn scheduled(
    row: &mut Row,
    info: onsale_domain::ShowInfo,
    layout: &onsale_domain::VenueLayout,
) -> anyhow::Result<()> {
    row.venue_id = Some(info.venue_id.to_string());
    row.venue_name = Some(info.venue_name);
    row.city = Some(info.city);
    row.show_name = Some(info.name);
    row.performer = Some(info.performer);
    row.starts_at = Some(info.starts_at);
    row.on_sale_at = Some(info.on_sale_at);
    row.hold_ttl_seconds = Some(i64::from(info.hold_ttl_seconds));
    row.waiting_room = Some(info.waiting_room);
    row.prices = Some(serde_json::to_string(&info.prices)?);
    row.layout = Some(serde_json::to_string(layout)?);
    row.policy = Some(serde_json::to_string(&info.policy)?);
    Ok(())
}

fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

fn strings() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

/// The Parquet files' columns, in order (docs/analysts-and-auditors.md documents each).
pub fn schema() -> SchemaRef {
    let f = |name: &str, t: DataType, nullable: bool| Field::new(name, t, nullable);
    Arc::new(Schema::new(vec![
        f("show_id", DataType::Utf8, false),
        f("sequence", DataType::Int64, false),
        f("event_type", DataType::Utf8, false),
        f("event_version", DataType::Utf8, false),
        f("committed_at", utc(), false),
        f("xid", DataType::Int64, false),
        f("actor", DataType::Utf8, true),
        f("account_id", DataType::Utf8, true),
        f("hold_id", DataType::Utf8, true),
        f("order_id", DataType::Utf8, true),
        f("seat_ids", strings(), true),
        f("taken_seat_ids", strings(), true),
        f("expires_at", utc(), true),
        f("best_available", DataType::Boolean, true),
        f("total_cents", DataType::Int64, true),
        f("reason", DataType::Utf8, true),
        f("refund_id", DataType::Utf8, true),
        f("event_at", utc(), true),
        f("venue_id", DataType::Utf8, true),
        f("venue_name", DataType::Utf8, true),
        f("city", DataType::Utf8, true),
        f("show_name", DataType::Utf8, true),
        f("performer", DataType::Utf8, true),
        f("starts_at", utc(), true),
        f("on_sale_at", utc(), true),
        f("hold_ttl_seconds", DataType::Int64, true),
        f("waiting_room", DataType::Boolean, true),
        f("prices", DataType::Utf8, true),
        f("layout", DataType::Utf8, true),
        f("policy", DataType::Utf8, true),
    ]))
}

/// Rows as one Arrow record batch of [`schema`].
pub fn batch(rows: &[Row]) -> anyhow::Result<RecordBatch> {
    fn text<'a>(rows: &'a [Row], f: impl Fn(&'a Row) -> Option<&'a str>) -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<StringArray>())
    }
    fn int(rows: &[Row], f: impl Fn(&Row) -> Option<i64>) -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<Int64Array>())
    }
    fn flag(rows: &[Row], f: impl Fn(&Row) -> Option<bool>) -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<BooleanArray>())
    }
    fn time(rows: &[Row], f: impl Fn(&Row) -> Option<DateTime<Utc>>) -> ArrayRef {
        Arc::new(
            rows.iter()
                .map(|r| f(r).map(|t| t.timestamp_micros()))
                .collect::<TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        )
    }
    fn list(rows: &[Row], f: impl Fn(&Row) -> Option<&Vec<String>>) -> ArrayRef {
        let mut b = ListBuilder::new(StringBuilder::new());
        for r in rows {
            match f(r) {
                Some(items) => {
                    for i in items {
                        b.values().append_value(i);
                    }
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        Arc::new(b.finish())
    }
    let columns = vec![
        text(rows, |r| Some(&r.show_id)),
        int(rows, |r| Some(r.sequence)),
        text(rows, |r| Some(&r.event_type)),
        text(rows, |r| Some(&r.event_version)),
        time(rows, |r| Some(r.committed_at)),
        int(rows, |r| Some(r.xid)),
        text(rows, |r| r.actor.as_deref()),
        text(rows, |r| r.account_id.as_deref()),
        text(rows, |r| r.hold_id.as_deref()),
        text(rows, |r| r.order_id.as_deref()),
        list(rows, |r| r.seat_ids.as_ref()),
        list(rows, |r| r.taken_seat_ids.as_ref()),
        time(rows, |r| r.expires_at),
        flag(rows, |r| r.best_available),
        int(rows, |r| r.total_cents),
        text(rows, |r| r.reason.as_deref()),
        text(rows, |r| r.refund_id.as_deref()),
        time(rows, |r| r.event_at),
        text(rows, |r| r.venue_id.as_deref()),
        text(rows, |r| r.venue_name.as_deref()),
        text(rows, |r| r.city.as_deref()),
        text(rows, |r| r.show_name.as_deref()),
        text(rows, |r| r.performer.as_deref()),
        time(rows, |r| r.starts_at),
        time(rows, |r| r.on_sale_at),
        int(rows, |r| r.hold_ttl_seconds),
        flag(rows, |r| r.waiting_room),
        text(rows, |r| r.prices.as_deref()),
        text(rows, |r| r.layout.as_deref()),
        text(rows, |r| r.policy.as_deref()),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}
