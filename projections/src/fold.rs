//! One event of the log as a projection sees it, and the show state it folds into.

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use onsale_domain::show::Seat;
use onsale_domain::transitions::SeatStatus;
use onsale_domain::{Show, ShowEvent, ShowId};
use onsale_kafka::envelope::parse_lsn;
use onsale_kafka::Envelope;
use serde::Deserialize;
use serde_json::Value;

/// An event of a show, from the topic or from the events table.
#[derive(Debug, Clone)]
pub struct LogEvent {
    pub show_id: ShowId,
    pub sequence: i64,
    pub event: ShowEvent,
    /// When the command side decided it (the row's metadata), else its commit time.
    pub at: DateTime<Utc>,
    /// The commit LSN, when it came through the relay (a backfill or the table has none).
    pub commit_lsn: Option<u64>,
    /// The commit time, when it came through the relay: lag is measured from it.
    pub committed_at: Option<DateTime<Utc>>,
    /// The sampled trace it belongs to (a W3C `traceparent`): the relay's span from the
    /// message's header (or the append's, from the row's metadata, for an event read from the
    /// table), then the projection's span it is folded under (docs/adr/019).
    pub trace: Option<String>,
}

impl LogEvent {
    /// `None` for rows of other aggregates (venues) on the topic.
    pub fn from_envelope(e: &Envelope) -> anyhow::Result<Option<Self>> {
        if e.after.aggregate_type != Show::TYPE {
            return Ok(None);
        }
        // From the parsed tree in place: no copy of it per event.
        let event = ShowEvent::deserialize(&e.after.payload)?;
        let committed_at = e.commit_time();
        let live = e.op == "c";
        Ok(Some(Self {
            show_id: e.after.aggregate_id.parse()?,
            sequence: e.after.sequence,
            event,
            at: metadata_at(&e.after.metadata)
                .or(committed_at)
                .unwrap_or_else(Utc::now),
            commit_lsn: live.then(|| parse_lsn(&e.source.commit_lsn)).flatten(),
            committed_at: live.then_some(committed_at).flatten(),
            trace: None,
        }))
    }

    /// A row read from the events table.
    pub fn from_row(
        show_id: ShowId,
        sequence: i64,
        payload: &str,
        metadata: &str,
    ) -> anyhow::Result<Self> {
        let meta: Value = serde_json::from_str(metadata)?;
        Ok(Self {
            show_id,
            sequence,
            event: serde_json::from_str(payload)?,
            at: metadata_at(&meta).unwrap_or_else(Utc::now),
            commit_lsn: None,
            committed_at: None,
            // Read from the table, not published: it continues the append's span.
            trace: onsale_telemetry::trace::enabled()
                .then(|| {
                    Some(
                        meta.get(onsale_telemetry::trace::TRACEPARENT)?
                            .as_str()?
                            .to_owned(),
                    )
                })
                .flatten(),
        })
    }
}

fn metadata_at(meta: &Value) -> Option<DateTime<Utc>> {
    meta.get("at")?.as_str()?.parse().ok()
}

/// What a projection is told about one applied event: the state after it, and each seat it
/// touched with that seat's status before.
#[derive(Debug)]
pub struct EventCtx<'a> {
    pub log: &'a LogEvent,
    pub after: &'a Show,
    pub touched: &'a [(u32, SeatStatus)],
}

/// Applies `log` to `show` and calls `f` with the context: the one place events are folded.
pub fn apply<R>(show: &mut Show, log: &LogEvent, f: impl FnOnce(&EventCtx<'_>) -> R) -> R {
    let touched: Vec<(u32, SeatStatus)> = show
        .seats_touched_by(&log.event)
        .into_iter()
        .map(|i| {
            (
                i,
                show.seat_at(i)
                    .map_or(SeatStatus::Available, |(_, s)| s.status()),
            )
        })
        .collect();
    show.apply(log.event.clone());
    f(&EventCtx {
        log,
        after: show,
        touched: &touched,
    })
}

/// The state of seat `i` of `show` after the event.
pub fn status_at(show: &Show, i: u32) -> SeatStatus {
    show.seat_at(i)
        .map_or(SeatStatus::Available, |(_, s): (&str, &Seat)| s.status())
}
