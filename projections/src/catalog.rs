//! The catalog's search projection: one row per scheduled show with what fans search and
//! filter on (names, venue, city, times, prices) and how many of its seats are available, so a
//! search can say a show is sold out. Searched by the query side (`query-side/src/catalog.rs`).

use std::collections::{BTreeMap, HashMap};

use onsale_domain::transitions::SeatStatus;
use onsale_domain::{Show, ShowEvent, ShowId, ShowInfo};
use sqlx::postgres::PgConnection;

use crate::fold::{status_at, EventCtx};
use crate::runner::Projection;

/// The catalog projection.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Available seats per show folded here.
    available: HashMap<ShowId, i32>,
    /// Shows scheduled since the last flush (inserted with their facts).
    scheduled: BTreeMap<ShowId, (ShowInfo, i32)>,
    /// Shows whose count changed since the last flush.
    dirty: BTreeMap<ShowId, i32>,
}

fn count_available(show: &Show) -> i32 {
    show.seats()
        .filter(|(_, s)| s.status() == SeatStatus::Available)
        .count() as i32
}

impl Projection for Catalog {
    const NAME: &'static str = "catalog";

    fn loaded(&mut self, show_id: ShowId, show: &Show) {
        self.available.insert(show_id, count_available(show));
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        let show = ctx.log.show_id;
        if let ShowEvent::ShowScheduled { info, layout } = &ctx.log.event {
            let seats = layout.seat_count() as i32;
            self.available.insert(show, seats);
            self.scheduled.insert(show, (info.clone(), seats));
            return;
        }
        let mut delta = 0;
        for &(seat, before) in ctx.touched {
            let after = status_at(ctx.after, seat);
            match (
                before == SeatStatus::Available,
                after == SeatStatus::Available,
            ) {
                (true, false) => delta -= 1,
                (false, true) => delta += 1,
                _ => {}
            }
        }
        if delta != 0 {
            let n = self.available.entry(show).or_default();
            *n += delta;
            self.dirty.insert(show, *n);
        }
    }

    async fn flush(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for (show, (info, seats)) in std::mem::take(&mut self.scheduled) {
            let available = self.dirty.remove(&show).unwrap_or(seats);
            let prices = info.prices.values();
            sqlx::query(
                "INSERT INTO catalog_events (event_id, name, performer, venue_id, venue_name, city,
                        starts_at, on_sale_at, min_price_cents, max_price_cents, waiting_room, seats, available)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (event_id) DO UPDATE SET available = EXCLUDED.available",
            )
            .bind(show.to_string())
            .bind(&info.name)
            .bind(&info.performer)
            .bind(info.venue_id.to_string())
            .bind(&info.venue_name)
            .bind(&info.city)
            .bind(info.starts_at)
            .bind(info.on_sale_at)
            .bind(prices.clone().min().copied().unwrap_or(0))
            .bind(prices.max().copied().unwrap_or(0))
            .bind(info.waiting_room)
            .bind(seats)
            .bind(available)
            .execute(&mut *tx)
            .await?;
        }
        let dirty = std::mem::take(&mut self.dirty);
        if !dirty.is_empty() {
            let (ids, counts): (Vec<String>, Vec<i32>) =
                dirty.into_iter().map(|(s, n)| (s.to_string(), n)).unzip();
            sqlx::query(
                "UPDATE catalog_events c SET available = u.n
                   FROM UNNEST($1::text[], $2::int[]) AS u(id, n) WHERE c.event_id = u.id",
            )
            .bind(&ids)
            .bind(&counts)
            .execute(&mut *tx)
            .await?;
        }
        Ok(())
    }

    async fn reset(tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query("TRUNCATE catalog_events")
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

/// How many seats of `show` the catalog has available now (`None` before it folded the show).
pub async fn available(pool: &sqlx::PgPool, show: ShowId) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar("SELECT available FROM catalog_events WHERE event_id = $1")
        .bind(show.to_string())
        .fetch_optional(pool)
        .await
}
