//! Seat history for auditors: every event that touched each seat, in log order.

use cqrs_es::DomainEvent;
use onsale_domain::{Show, ShowId};
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
            .map(|h| h.account.to_string());
        for &(seat, _) in ctx.touched {
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
            r.account_id.push(account.clone());
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
            "INSERT INTO seat_history (show_id, seat_id, sequence, at, type, hold_id, order_id, account_id)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[],
                                  $6::text[], $7::text[], $8::text[])
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
