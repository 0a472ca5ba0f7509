//! Seat history for auditors: every event that touched each seat, in log order, with who did
//! it, when it was decided and committed, its commit LSN and what else it said. (Tickets
//! issued, scanned and revoked are not in the log: the query side reads them from `tickets`
//! and interleaves them.)

use cqrs_es::DomainEvent;
use onsale_domain::{AccountId, Show, ShowEvent, ShowId};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgConnection;

use crate::fold::EventCtx;
use crate::runner::Projection;

#[derive(Debug, Default)]
struct Rows {
    show_id: Vec<String>,
    seat_id: Vec<String>,
    sequence: Vec<i64>,
    at: Vec<chrono::DateTime<chrono::Utc>>,
    kind: Vec<String>,
    hold_id: Vec<Option<String>>,
    order_id: Vec<Option<String>>,
    account_id: Vec<Option<String>>,
    committed_at: Vec<Option<chrono::DateTime<chrono::Utc>>>,
    lsn: Vec<Option<String>>,
    actor: Vec<Option<String>>,
    detail: Vec<Option<sqlx::types::Json<Detail>>>,
}

/// What else an event said that an auditor asks about: a hold's expiry, an order's total, a
/// failure's code and reason, a late capture, a refund's id. The entry's `detail` document;
/// each member is absent unless its event says it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = HistoryDetail)]
pub struct Detail {
    /// SeatsHeld: when the hold lapses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// SeatsHeld: the seats were the show's best available, not picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_available: Option<bool>,
    /// OrderPlaced: the order's total in the show's currency's minor units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cents: Option<i64>,
    /// PaymentFailed: the failure's code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// PaymentFailed, PaymentAmbiguous, MakeGoodOwed: why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// OrderReinstated, MakeGoodOwed: a capture settled after the order had failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<bool>,
    /// MakeGoodOwed: the order's seats somebody else has now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_seat_ids: Option<Vec<String>>,
    /// OrderRefunded: the refund's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_id: Option<String>,
}

/// Who did it (an account, or the part of onsale or the processor that decided it) and what
/// else the event said that an auditor asks about.
fn actor_and_detail(
    event: &ShowEvent,
    account: Option<&AccountId>,
) -> (Option<String>, Option<Detail>) {
    let actor = event.actor(account).map(|a| a.to_string());
    let none = Detail::default();
    let detail = match event {
        ShowEvent::SeatsHeld {
            expires_at,
            best_available,
            ..
        } => Some(Detail {
            expires_at: Some(*expires_at),
            best_available: Some(*best_available),
            ..none
        }),
        ShowEvent::OrderPlaced { total_cents, .. } => Some(Detail {
            total_cents: Some(*total_cents),
            ..none
        }),
        ShowEvent::PaymentFailed { code, reason, .. } => Some(Detail {
            code: Some(code.as_str().to_owned()),
            reason: Some(reason.clone()),
            ..none
        }),
        ShowEvent::PaymentAmbiguous { reason, .. } => Some(Detail {
            reason: Some(reason.clone()),
            ..none
        }),
        ShowEvent::OrderReinstated { .. } => Some(Detail {
            late: Some(true),
            ..none
        }),
        ShowEvent::MakeGoodOwed {
            taken_seat_ids,
            reason,
            ..
        } => Some(Detail {
            late: Some(true),
            taken_seat_ids: Some(taken_seat_ids.iter().map(ToString::to_string).collect()),
            reason: Some(reason.clone()),
            ..none
        }),
        ShowEvent::OrderRefunded { refund_id, .. } => Some(Detail {
            refund_id: Some(refund_id.clone()),
            ..none
        }),
        ShowEvent::ShowScheduled { .. }
        | ShowEvent::HoldReleased { .. }
        | ShowEvent::HoldExpired { .. }
        | ShowEvent::PaymentSucceeded { .. }
        | ShowEvent::OrderCompensated { .. }
        | ShowEvent::OrderCancelled { .. }
        | ShowEvent::SalePolicyChanged { .. } => None,
    };
    (actor, detail)
}

/// The seat-history projection.
#[derive(Debug, Default)]
pub struct SeatHistory {
    rows: Rows,
}

impl Projection for SeatHistory {
    const NAME: &'static str = "seat_history";

    fn loaded(&mut self, _show_id: ShowId, _show: &Show) {}

    fn event(&mut self, ctx: &EventCtx<'_>) {
        let show = ctx.after;
        let event = &ctx.log.event;
        let (kind, hold, order) = (event.event_type(), event.hold_id(), event.order_id());
        let hold = hold.or_else(|| order.and_then(|o| show.order(&o)).map(|o| o.hold_id));
        let account = hold
            .and_then(|h| show.hold(&h))
            .map(|h| h.account.clone())
            .or_else(|| {
                order
                    .and_then(|o| show.order(&o))
                    .map(|o| o.account.clone())
            });
        let (actor, detail) = actor_and_detail(event, account.as_ref());
        let detail = detail.map(sqlx::types::Json);
        // A late capture's make-good and a refund move no seat, but belong to the history of
        // the order's seats.
        let seats: Vec<u32> = if ctx.touched.is_empty() {
            order
                .and_then(|o| show.order(&o))
                .map(|o| o.seats.clone())
                .unwrap_or_default()
        } else {
            ctx.touched.iter().map(|&(seat, _)| seat).collect()
        };
        let lsn = ctx.log.commit_lsn.map(onsale_kafka::envelope::format_lsn);
        for seat in seats {
            let Some((seat_id, _)) = show.seat_at(seat) else {
                continue;
            };
            let r = &mut self.rows;
            r.show_id.push(ctx.log.show_id.to_string());
            r.seat_id.push(seat_id.to_owned());
            r.sequence.push(ctx.log.sequence);
            r.at.push(ctx.log.at);
            r.kind.push(kind.clone());
            r.hold_id.push(hold.map(|h| h.to_string()));
            r.order_id.push(order.map(|o| o.to_string()));
            r.account_id.push(account.as_ref().map(ToString::to_string));
            r.committed_at.push(ctx.log.committed_at);
            r.lsn.push(lsn.clone());
            r.actor.push(actor.clone());
            r.detail.push(detail.clone());
        }
    }

    async fn flush(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        let r = std::mem::take(&mut self.rows);
        if r.seat_id.is_empty() {
            return Ok(());
        }
        // The position check already skips applied events; the key makes a second insert of the
        // same (show, seat, sequence) impossible rather than merely unlikely.
        sqlx::query(
            "INSERT INTO seat_history (show_id, seat_id, sequence, at, type, hold_id, order_id, account_id,
                                       committed_at, lsn, actor, detail)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::timestamptz[], $10::text[],
                                  $11::text[], $12::jsonb[])
             ON CONFLICT DO NOTHING",
        )
        .bind(&r.show_id)
        .bind(&r.seat_id)
        .bind(&r.sequence)
        .bind(&r.at)
        .bind(&r.kind)
        .bind(&r.hold_id)
        .bind(&r.order_id)
        .bind(&r.account_id)
        .bind(&r.committed_at)
        .bind(&r.lsn)
        .bind(&r.actor)
        .bind(&r.detail)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }

    async fn reset(tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query("TRUNCATE seat_history")
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

/// Where a page of a seat's history starts: after the entry at (`at`, `src`, `sequence`,
/// `ticket`), or from the start when `at` is `None`. `src` orders entries of one instant: the
/// log's (0) before a ticket's issue (1), scan (2) and revocation (3).
#[derive(Debug, Clone, Copy, Default)]
pub struct After {
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    pub src: i32,
    pub sequence: i64,
    pub ticket: uuid::Uuid,
}

/// `entries` (a statement of rows `sequence, at, committed_at, type, hold_id, order_id,
/// account_id, lsn, actor, ticket_id, detail, src` with `$1` the show and `$2` the seat) paged
/// after `$3..$6` ([`After`]) in history order, at most `$7` rows: the one ordering the log's
/// page here and the tickets' page (`onsale_payments_store::tickets::seat_page`) share, so the two
/// merge.
pub fn page_of(entries: &str) -> String {
    format!(
        "SELECT * FROM ({entries}) e
          WHERE ($3::timestamptz IS NULL
                 OR (e.at, e.src, COALESCE(e.sequence, 0), COALESCE(e.ticket_id, '00000000-0000-0000-0000-000000000000'::uuid))
                    > ($3::timestamptz, $4, $5, $6))
          ORDER BY e.at, e.src, COALESCE(e.sequence, 0), COALESCE(e.ticket_id, '00000000-0000-0000-0000-000000000000'::uuid)
          LIMIT $7"
    )
}

/// The page of `seat`'s history the log's events make (rows `T`, [`page_of`]'s columns).
pub async fn seat_page<T>(
    reads: &sqlx::PgPool,
    show: ShowId,
    seat: &str,
    after: &After,
    limit: i64,
) -> Result<Vec<T>, sqlx::Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    static LOGGED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        page_of(
            "SELECT h.sequence, h.at, h.committed_at, h.type, h.hold_id, h.order_id, h.account_id,
                    h.lsn, h.actor, NULL::uuid AS ticket_id, h.detail, 0 AS src
               FROM seat_history h WHERE h.show_id = $1 AND h.seat_id = $2",
        )
    });
    bind_page(sqlx::query_as(&LOGGED), show, seat, after, limit)
        .fetch_all(reads)
        .await
}

/// `query` (a statement made by [`page_of`]) with its parameters bound: the show, the seat, where
/// the page starts, and how many rows.
pub fn bind_page<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    show: ShowId,
    seat: &'q str,
    after: &After,
    limit: i64,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(show.to_string())
        .bind(seat)
        .bind(after.at)
        .bind(after.src)
        .bind(after.sequence)
        .bind(after.ticket)
        .bind(limit)
}
