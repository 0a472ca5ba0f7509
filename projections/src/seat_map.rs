//! The seat map: per seat its public status, per section its counts, per show the watermark
//! (`lsn`, `seq`), and the deltas.
//!
//! Rows are written on every batch (so the map lags the commit by milliseconds); a changed seat
//! or section is marked pending (`delta_seq IS NULL`). The tick turns the pending rows of a show
//! into one delta with the next `seq`, in one transaction with the rows it marks: the delta is
//! built from what was committed, so a crash between a batch and a tick loses nothing, and every
//! change reaches exactly one delta. Deltas carry absolute values, so a snapshot read between
//! two ticks and then moved forward by the next delta converges on the same map.

use std::collections::{BTreeSet, HashMap};

use onsale_domain::transitions::SeatStatus;
use onsale_domain::{Show, ShowId};
use onsale_telemetry::trace;
use sqlx::postgres::PgConnection;

use crate::fold::{status_at, EventCtx};
use crate::runner::Projection;

/// Deltas kept per show for clients that resume (`Last-Event-ID`, `after_seq`); older gaps resync.
pub const DELTA_RETENTION: i64 = 3_600;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    total: i32,
    available: i32,
    held: i32,
    sold: i32,
}

impl Counts {
    fn bucket(&mut self, s: SeatStatus) -> &mut i32 {
        match s {
            SeatStatus::Available => &mut self.available,
            SeatStatus::Held => &mut self.held,
            SeatStatus::PendingPayment | SeatStatus::Sold => &mut self.sold,
        }
    }
}

#[derive(Debug, Default)]
struct MapState {
    sections: Vec<(String, std::ops::Range<u32>)>,
    /// Per section, whether it is general admission.
    general_admission: Vec<bool>,
    counts: Vec<Counts>,
    /// Scheduled since the last flush: every row must be inserted (as AVAILABLE; seats that
    /// changed in the same batch are in `dirty_seats` and updated right after).
    created: bool,
    dirty_sections: BTreeSet<usize>,
    dirty_seats: HashMap<u32, &'static str>,
    /// The seat ids of a show scheduled since the last flush.
    seat_names: HashMap<u32, String>,
    /// Something may be pending a delta.
    pending: bool,
    /// The newest commit LSN folded in since the last flush.
    lsn: Option<u64>,
    /// The sampled traces of the events pending a delta (at most [`TRACES_PER_DELTA`]).
    traces: Vec<String>,
}

/// Most traces one delta names: with sampling on, a busy show's delta carries many holds.
const TRACES_PER_DELTA: usize = 16;

impl MapState {
    fn section_of(&self, seat: u32) -> usize {
        self.sections.partition_point(|(_, r)| r.end <= seat)
    }

    fn recount(&mut self, show: &Show) {
        self.sections = show
            .layout()
            .section_ranges()
            .into_iter()
            .map(|(n, r)| (n.to_owned(), r))
            .collect();
        self.general_admission = show
            .layout()
            .sections()
            .iter()
            .map(|s| s.general_admission)
            .collect();
        self.counts = vec![Counts::default(); self.sections.len()];
        for (i, (_, range)) in self.sections.iter().enumerate() {
            let c = &mut self.counts[i];
            c.total = range.len() as i32;
            for seat in range.clone() {
                *c.bucket(status_at(show, seat)) += 1;
            }
        }
    }
}

/// The seat-map projection.
#[derive(Debug, Default)]
pub struct SeatMap {
    shows: HashMap<ShowId, MapState>,
}

impl Projection for SeatMap {
    const NAME: &'static str = "seat_map";

    fn loaded(&mut self, show_id: ShowId, show: &Show) {
        let mut state = MapState {
            pending: true,
            ..MapState::default()
        };
        state.recount(show);
        self.shows.insert(show_id, state);
    }

    fn unloaded(&mut self, show_id: ShowId) {
        self.shows.remove(&show_id);
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        let state = self.shows.entry(ctx.log.show_id).or_default();
        if let Some(parent) = &ctx.log.trace {
            if state.traces.len() < TRACES_PER_DELTA {
                state.traces.push(parent.clone());
            }
        }
        if let Some(lsn) = ctx.log.commit_lsn {
            state.lsn = Some(state.lsn.map_or(lsn, |l| l.max(lsn)));
        }
        if matches!(
            ctx.log.event,
            onsale_domain::ShowEvent::ShowScheduled { .. }
        ) {
            state.recount(ctx.after);
            state.seat_names = (0..ctx.after.seat_count() as u32)
                .filter_map(|i| ctx.after.seat_at(i).map(|(n, _)| (i, n.to_owned())))
                .collect();
            state.created = true;
            state.pending = true;
            return;
        }
        for &(seat, before) in ctx.touched {
            let after = status_at(ctx.after, seat);
            if after == before {
                continue;
            }
            let section = state.section_of(seat);
            *state.counts[section].bucket(before) -= 1;
            *state.counts[section].bucket(after) += 1;
            state.dirty_sections.insert(section);
            state.pending = true;
            if before.public() != after.public() {
                state.dirty_seats.insert(seat, after.public());
            }
        }
    }

    async fn flush(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for (show_id, state) in &mut self.shows {
            if state.created {
                // Seq 0 is the show as scheduled (what a reader gets before the projection has
                // folded it); what changed in the same batch is pending, for delta 1.
                insert_show(tx, *show_id, state).await?;
                state.created = false;
                state.seat_names.clear();
            }
            if !state.dirty_seats.is_empty() {
                let (mut sections, mut ords, mut statuses) = (Vec::new(), Vec::new(), Vec::new());
                for (&seat, &status) in &state.dirty_seats {
                    let s = state.section_of(seat);
                    sections.push(state.sections[s].0.clone());
                    ords.push((seat - state.sections[s].1.start) as i32);
                    statuses.push(status);
                }
                sqlx::query(
                    "UPDATE seat_map_seats AS m SET status = u.st, delta_seq = NULL
                       FROM UNNEST($2::text[], $3::int[], $4::text[]) AS u(sec, ord, st)
                      WHERE m.show_id = $1 AND m.section = u.sec AND m.ord = u.ord",
                )
                .bind(show_id.to_string())
                .bind(&sections)
                .bind(&ords)
                .bind(&statuses)
                .execute(&mut *tx)
                .await?;
                state.dirty_seats.clear();
            }
            if !state.dirty_sections.is_empty() {
                let rows: Vec<(String, Counts)> = state
                    .dirty_sections
                    .iter()
                    .map(|&i| (state.sections[i].0.clone(), state.counts[i]))
                    .collect();
                update_sections(tx, *show_id, &rows).await?;
                state.dirty_sections.clear();
            }
            if let Some(lsn) = state.lsn.take() {
                sqlx::query(
                    "UPDATE seat_map_shows SET lsn = GREATEST(lsn, $2::pg_lsn), updated_at = now()
                      WHERE show_id = $1",
                )
                .bind(show_id.to_string())
                .bind(onsale_kafka::envelope::format_lsn(lsn))
                .execute(&mut *tx)
                .await?;
            }
        }
        Ok(())
    }

    async fn tick(&mut self, tx: &mut PgConnection) -> anyhow::Result<()> {
        for (show_id, state) in &mut self.shows {
            if !state.pending {
                // Traced events that changed nothing a delta shows.
                state.traces.clear();
                continue;
            }
            state.pending = false;
            let spans: Vec<tracing::Span> = state
                .traces
                .drain(..)
                .map(|parent| {
                    let span = tracing::info_span!(target: trace::TARGET, "seat_map.delta", show = %show_id);
                    trace::follow(&span, &parent);
                    span
                })
                .collect();
            let traces: Vec<String> = spans.iter().filter_map(trace::traceparent).collect();
            if let Some(seq) = publish_delta(tx, *show_id, &traces).await? {
                metrics::counter!(onsale_telemetry::metrics::SEAT_MAP_DELTAS_TOTAL).increment(1);
                tracing::debug!(%show_id, seq, "delta published");
            }
        }
        Ok(())
    }

    async fn reset(tx: &mut PgConnection) -> anyhow::Result<()> {
        sqlx::query("TRUNCATE seat_map_shows, seat_map_sections, seat_map_seats, seat_map_deltas")
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

async fn insert_show(
    tx: &mut PgConnection,
    show_id: ShowId,
    state: &MapState,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO seat_map_shows (show_id, seq, lsn, updated_at) VALUES ($1, 0, '0/0', now())
         ON CONFLICT (show_id) DO NOTHING",
    )
    .bind(show_id.to_string())
    .execute(&mut *tx)
    .await?;
    let (mut secs, mut ords, mut ids) = (Vec::new(), Vec::new(), Vec::new());
    for (name, range) in &state.sections {
        for (ord, seat) in range.clone().enumerate() {
            secs.push(name.clone());
            ords.push(ord as i32);
            ids.push(state.seat_names.get(&seat).cloned().unwrap_or_default());
        }
    }
    // A new show is all AVAILABLE, at seq 0: nothing pending.
    sqlx::query(
        "INSERT INTO seat_map_seats (show_id, section, ord, seat_id, status, delta_seq)
         SELECT $1, sec, ord, id, 'AVAILABLE', 0 FROM UNNEST($2::text[], $3::int[], $4::text[]) AS u(sec, ord, id)
         ON CONFLICT DO NOTHING",
    )
    .bind(show_id.to_string())
    .bind(&secs)
    .bind(&ords)
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    let (mut names, mut order, mut totals, mut avail, mut held, mut sold) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let ga = &state.general_admission;
    // As scheduled: every seat available (the batch's later changes are updated right after,
    // pending a delta).
    for (i, ((name, _), c)) in state.sections.iter().zip(&state.counts).enumerate() {
        names.push(name.clone());
        order.push(i as i32);
        totals.push(c.total);
        avail.push(c.total);
        held.push(0);
        sold.push(0);
    }
    sqlx::query(
        "INSERT INTO seat_map_sections (show_id, ord, section, total, available, held, sold, delta_seq,
                                        general_admission)
         SELECT $1, o, n, t, a, h, s, 0, g
           FROM UNNEST($2::int[], $3::text[], $4::int[], $5::int[], $6::int[], $7::int[], $8::bool[])
                AS u(o, n, t, a, h, s, g)
         ON CONFLICT DO NOTHING",
    )
    .bind(show_id.to_string())
    .bind(&order)
    .bind(&names)
    .bind(&totals)
    .bind(&avail)
    .bind(&held)
    .bind(&sold)
    .bind(ga)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn update_sections(
    tx: &mut PgConnection,
    show_id: ShowId,
    rows: &[(String, Counts)],
) -> anyhow::Result<()> {
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    let avail: Vec<i32> = rows.iter().map(|(_, c)| c.available).collect();
    let held: Vec<i32> = rows.iter().map(|(_, c)| c.held).collect();
    let sold: Vec<i32> = rows.iter().map(|(_, c)| c.sold).collect();
    sqlx::query(
        "UPDATE seat_map_sections AS m SET available = u.a, held = u.h, sold = u.s, delta_seq = NULL
           FROM UNNEST($2::text[], $3::int[], $4::int[], $5::int[]) AS u(n, a, h, s)
          WHERE m.show_id = $1 AND m.section = u.n",
    )
    .bind(show_id.to_string())
    .bind(&names)
    .bind(&avail)
    .bind(&held)
    .bind(&sold)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A changed seat in a delta.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeatChange {
    pub seat_id: onsale_domain::SeatId,
    pub section: String,
    pub status: String,
}

/// Changed section counts in a delta (and a section of a seat map).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, sqlx::FromRow)]
pub struct SectionCounts {
    pub section: String,
    pub total: i32,
    pub available: i32,
    pub held: i32,
    pub sold: i32,
    /// Sold by quantity: counts only, no seats (deltas published before it existed: false).
    #[serde(rename = "generalAdmission", default)]
    pub general_admission: bool,
}

/// What a delta changed (`seat_map_deltas.body`): the sections whose counts moved and the seats
/// whose status did. The one type the projection writes and the query side reads.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Changes {
    pub sections: Vec<SectionCounts>,
    pub seats: Vec<SeatChange>,
}

/// Turns the show's pending rows into the next delta; `None` when nothing was pending.
async fn publish_delta(
    tx: &mut PgConnection,
    show_id: ShowId,
    traces: &[String],
) -> anyhow::Result<Option<i64>> {
    let row: Option<(i64, String)> = sqlx::query_as(
        "SELECT seq + 1, lsn::text FROM seat_map_shows WHERE show_id = $1 FOR UPDATE",
    )
    .bind(show_id.to_string())
    .fetch_optional(&mut *tx)
    .await?;
    // A show loaded before its first event has no map yet.
    let Some((seq, lsn)) = row else {
        return Ok(None);
    };
    let sections: Vec<SectionCounts> = sqlx::query_as(
        "UPDATE seat_map_sections SET delta_seq = $2 WHERE show_id = $1 AND delta_seq IS NULL
         RETURNING section, total, available, held, sold, general_admission",
    )
    .bind(show_id.to_string())
    .bind(seq)
    .fetch_all(&mut *tx)
    .await?;
    let seats: Vec<(String, String, String)> = sqlx::query_as(
        "UPDATE seat_map_seats SET delta_seq = $2 WHERE show_id = $1 AND delta_seq IS NULL
         RETURNING seat_id, section, status",
    )
    .bind(show_id.to_string())
    .bind(seq)
    .fetch_all(&mut *tx)
    .await?;
    if sections.is_empty() && seats.is_empty() {
        return Ok(None);
    }
    let seats = seats
        .into_iter()
        .map(|(seat_id, section, status)| {
            Ok(SeatChange {
                seat_id: onsale_domain::SeatId::parse(&seat_id)?,
                section,
                status,
            })
        })
        .collect::<Result<Vec<_>, onsale_domain::ShowError>>()?;
    let body = sqlx::types::Json(Changes { sections, seats });
    sqlx::query(
        "INSERT INTO seat_map_deltas (show_id, seq, lsn, at, body, traceparents)
         VALUES ($1, $2, $3::pg_lsn, now(), $4, $5)",
    )
    .bind(show_id.to_string())
    .bind(seq)
    .bind(&lsn)
    .bind(&body)
    .bind((!traces.is_empty()).then_some(traces))
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE seat_map_shows SET seq = $2 WHERE show_id = $1")
        .bind(show_id.to_string())
        .bind(seq)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM seat_map_deltas WHERE show_id = $1 AND seq <= $2")
        .bind(show_id.to_string())
        .bind(seq - DELTA_RETENTION)
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_notify('onsale_seat_map', $1)")
        .bind(format!("{show_id} {seq}"))
        .execute(&mut *tx)
        .await?;
    Ok(Some(seq))
}

/// `(show, available, held, seats of orders still paying)` of each of `shows` the seat map
/// has folded: its section counts (whose sold seats include those of orders still paying) and
/// the orders projection's pending orders.
pub async fn availability(
    reads: &sqlx::PgPool,
    shows: &[String],
) -> Result<Vec<(String, i64, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.show_id, sum(s.available)::bigint, sum(s.held)::bigint,
                COALESCE((SELECT sum(cardinality(o.seat_ids)) FROM orders_view o
                           WHERE o.show_id = s.show_id AND o.status = 'PENDING_PAYMENT'), 0)::bigint
           FROM seat_map_sections s WHERE s.show_id = ANY($1) GROUP BY s.show_id",
    )
    .bind(shows)
    .fetch_all(reads)
    .await
}

/// The seats of `show` still to be sold (available or held), `None` before the seat map
/// folded it.
pub async fn seats_left(reads: &sqlx::PgPool, show: ShowId) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT sum(available + held)::bigint FROM seat_map_sections WHERE show_id = $1",
    )
    .bind(show.to_string())
    .fetch_one(reads)
    .await
}

/// One stored delta of a show's seat map.
#[derive(Debug, sqlx::FromRow)]
pub struct StoredDelta {
    pub seq: i64,
    pub lsn: String,
    pub at: chrono::DateTime<chrono::Utc>,
    pub body: sqlx::types::Json<Changes>,
    pub traceparents: Option<Vec<String>>,
}

/// The deltas of `show` after `after`, at most `limit`, in order.
pub async fn deltas(
    reads: &sqlx::PgPool,
    show: ShowId,
    after: i64,
    limit: i64,
) -> Result<Vec<StoredDelta>, sqlx::Error> {
    sqlx::query_as(
        "SELECT seq, lsn::text AS lsn, at, body, traceparents FROM seat_map_deltas
          WHERE show_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
    )
    .bind(show.to_string())
    .bind(after)
    .bind(limit)
    .fetch_all(reads)
    .await
}

/// The sequence of `show`'s last delta (`None` before the seat map folded it).
pub async fn delta_seq(reads: &sqlx::PgPool, show: ShowId) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT seq FROM seat_map_shows WHERE show_id = $1")
        .bind(show.to_string())
        .fetch_optional(reads)
        .await
}

/// Whether the seat map has folded `show`, and whether it has `seat` in it.
pub async fn knows(
    reads: &sqlx::PgPool,
    show: ShowId,
    seat: &str,
) -> Result<(bool, bool), sqlx::Error> {
    sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM seat_map_shows WHERE show_id = $1),
                EXISTS (SELECT 1 FROM seat_map_seats WHERE show_id = $1 AND seat_id = $2)",
    )
    .bind(show.to_string())
    .bind(seat)
    .fetch_one(reads)
    .await
}

/// One read of a show's seat map: its watermark, its section counts (JSON, in order), one
/// section's seats (when asked) and whether that section exists; one statement, so one
/// consistent picture.
#[derive(Debug, sqlx::FromRow)]
pub struct MapRead {
    pub lsn: String,
    pub seq: i64,
    pub as_of: chrono::DateTime<chrono::Utc>,
    pub sections: serde_json::Value,
    pub seats: Option<serde_json::Value>,
    /// With [`Scope::All`]: whether each reserved seat is sold, in the layout's order
    /// (general-admission places left out).
    pub sold: Option<Vec<bool>>,
    pub section_known: bool,
}

/// What a read of the map carries besides the section counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    Counts,
    /// The seats of one section, with their ids.
    Section(&'a str),
    /// Every reserved seat, sold or not, in the layout's order.
    All,
}

/// `show`'s seat map with what `scope` asks (`None` before the seat map folded the show), in
/// one statement: the counts, the seats and the watermark are one picture.
pub async fn read(
    reads: &sqlx::PgPool,
    show: ShowId,
    scope: Scope<'_>,
) -> Result<Option<MapRead>, sqlx::Error> {
    let section = match scope {
        Scope::Section(s) => Some(s),
        Scope::Counts | Scope::All => None,
    };
    sqlx::query_as(
        "SELECT m.lsn::text AS lsn, m.seq, statement_timestamp() AS as_of,
                (SELECT COALESCE(json_agg(json_build_object('section', section, 'total', total,
                         'available', available, 'held', held, 'sold', sold,
                         'generalAdmission', general_admission) ORDER BY ord), '[]')
                   FROM seat_map_sections WHERE show_id = $1) AS sections,
                CASE WHEN $2::text IS NULL THEN NULL ELSE
                  (SELECT json_agg(json_build_object('seatId', seat_id, 'status', status) ORDER BY ord)
                     FROM seat_map_seats WHERE show_id = $1 AND section = $2) END AS seats,
                CASE WHEN $3 THEN
                  (SELECT COALESCE(array_agg(s.status = 'SOLD' ORDER BY c.ord, s.ord), '{}')
                     FROM seat_map_seats s JOIN seat_map_sections c USING (show_id, section)
                    WHERE s.show_id = $1 AND NOT c.general_admission) END AS sold,
                $2::text IS NULL OR EXISTS (SELECT 1 FROM seat_map_sections WHERE show_id = $1 AND section = $2) AS section_known
           FROM seat_map_shows m WHERE m.show_id = $1",
    )
    .bind(show.to_string())
    .bind(section)
    .bind(scope == Scope::All)
    .fetch_optional(reads)
    .await
}

/// `(seat, status)` of every seat of `show` the seat map holds.
pub async fn seat_statuses(
    reads: &sqlx::PgPool,
    show: &str,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT seat_id, status FROM seat_map_seats WHERE show_id = $1")
        .bind(show)
        .fetch_all(reads)
        .await
}
