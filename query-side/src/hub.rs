//! Deltas to subscribers: one PostgreSQL listener per process, per show a broadcast channel. A
//! subscriber that resumes, lags or sees a gap is filled from the deltas
//! table; what the table no longer has is a `Resync`, never a silent gap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use onsale_domain::ShowId;
use onsale_telemetry::supervise::Loops;
use onsale_telemetry::trace;

use crate::seats::Seats;
use serde::Serialize;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use onsale_projections::seat_map::{SeatChange, SectionCounts};

/// One delta as the projection published it.
#[derive(Debug)]
pub struct Delta {
    pub seq: i64,
    pub lsn: String,
    pub at: DateTime<Utc>,
    pub sections: Vec<SectionCounts>,
    pub seats: Vec<SeatChange>,
    /// The SSE body for subscribers of no section: serialized once for all of them.
    pub body_without_seats: String,
    /// The sampled traces whose events it carries (docs/adr/019).
    pub traces: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DeltaBody<'a> {
    seq: i64,
    lsn: &'a str,
    as_of: DateTime<Utc>,
    sections: &'a [SectionCounts],
    seats: Vec<&'a SeatChange>,
}

impl Delta {
    fn new(
        seq: i64,
        lsn: String,
        at: DateTime<Utc>,
        stored: onsale_projections::seat_map::Changes,
        traces: Vec<String>,
    ) -> anyhow::Result<Self> {
        let mut d = Self {
            seq,
            lsn,
            at,
            sections: stored.sections,
            seats: stored.seats,
            body_without_seats: String::new(),
            traces,
        };
        d.body_without_seats = d.body(&Seats::None);
        Ok(d)
    }

    /// The JSON body for a subscriber of a section (its seats only), of every seat, or of none.
    pub fn body(&self, seats: &Seats) -> String {
        if *seats == Seats::None && !self.body_without_seats.is_empty() {
            return self.body_without_seats.clone();
        }
        let body = DeltaBody {
            seq: self.seq,
            lsn: &self.lsn,
            as_of: self.at,
            sections: &self.sections,
            seats: self.seats_of(seats),
        };
        serde_json::to_string(&body).unwrap_or_default()
    }

    pub fn seats_of(&self, seats: &Seats) -> Vec<&SeatChange> {
        match seats {
            Seats::Section(s) => self.seats.iter().filter(|c| &c.section == s).collect(),
            Seats::All => self.seats.iter().collect(),
            Seats::None => Vec::new(),
        }
    }
}

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Update {
    Delta(Arc<Delta>),
    /// The stream cannot be continued without a gap: fetch the snapshot, resume from its `seq`.
    Resync {
        seq: i64,
        reason: &'static str,
    },
    /// This process is shutting down: reconnect (to another node, or this one once it is back)
    /// and resume from the last `seq`.
    Closing,
}

#[derive(Debug)]
struct ShowHub {
    tx: broadcast::Sender<Arc<Delta>>,
    /// The last seq broadcast.
    last: tokio::sync::Mutex<i64>,
}

#[derive(Debug, Clone)]
pub struct Hub {
    pool: PgPool,
    shows: Arc<Mutex<HashMap<ShowId, Arc<ShowHub>>>>,
    /// The newest seq seen per show: the seat-map cache is keyed by it.
    seqs: Arc<Mutex<HashMap<ShowId, i64>>>,
    /// Per show, held while its hub is made: the first subscribers of a show (a hot on-sale
    /// reaching a fresh process: thousands at once) wait for one read of its seq, not one each.
    making: Arc<Mutex<HashMap<ShowId, Arc<tokio::sync::Mutex<()>>>>>,
    shutdown: CancellationToken,
    /// The listener, the poll and every subscription: the server waits for them.
    tasks: TaskTracker,
}

impl Hub {
    /// Starts the listener and the poll, each supervised on `loops`; they stop, and every
    /// subscription is closed with [`Update::Closing`], at the loops' stop.
    pub fn start(pool: PgPool, loops: &Loops) -> Self {
        let hub = Self {
            pool,
            shows: Arc::default(),
            seqs: Arc::default(),
            making: Arc::default(),
            shutdown: loops.stop().clone(),
            tasks: loops.tracker().clone(),
        };
        let listening = hub.clone();
        loops.spawn("seat-map listener", move || listening.clone().listen());
        let polling = hub.clone();
        loops.spawn("seat-map poll", move || polling.clone().poll());
        hub
    }

    /// The newest delta seq this process knows for a show.
    pub fn current_seq(&self, show: ShowId) -> Option<i64> {
        self.seqs.lock().ok()?.get(&show).copied()
    }

    fn note_seq(&self, show: ShowId, seq: i64) {
        if let Ok(mut seqs) = self.seqs.lock() {
            let e = seqs.entry(show).or_insert(seq);
            *e = (*e).max(seq);
        }
    }

    async fn listen(self) {
        let shutdown = self.shutdown.clone();
        while let Some(result) = shutdown.run_until_cancelled(self.listen_once()).await {
            if let Err(e) = result {
                let standby = e.downcast_ref::<sqlx::Error>().is_some_and(|e| {
                    e.as_database_error()
                        .and_then(|d| d.code())
                        .is_some_and(|c| c == "25006")
                });
                if standby {
                    // A standby region's database takes no LISTEN (docs/adr/024): its deltas
                    // come from the poll, as the writer's projection replicates them. Not an
                    // end its supervisor should restart: it waits for shutdown.
                    tracing::info!("the database is a standby: deltas come from the poll");
                    shutdown.cancelled().await;
                    return;
                }
                tracing::warn!(error = %e, "seat-map listener lost; reconnecting");
            }
            if shutdown
                .run_until_cancelled(tokio::time::sleep(Duration::from_millis(500)))
                .await
                .is_none()
            {
                break;
            }
        }
    }

    async fn listen_once(&self) -> anyhow::Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen("onsale_seat_map").await?;
        // Whatever was published while we were not listening.
        self.refresh_all().await?;
        loop {
            let n = listener.recv().await?;
            let Some((show, seq)) = n.payload().split_once(' ') else {
                continue;
            };
            let (Ok(show), Ok(seq)) = (show.parse::<ShowId>(), seq.parse::<i64>()) else {
                continue;
            };
            self.note_seq(show, seq);
            let hub = self.shows.lock().ok().and_then(|s| s.get(&show).cloned());
            if let Some(hub) = hub {
                if let Err(e) = self.advance(show, &hub).await {
                    tracing::warn!(%show, error = %e, "deltas not read");
                }
            }
        }
    }

    /// A backstop for a missed notification: each show with subscribers is checked every second.
    async fn poll(self) {
        let shutdown = self.shutdown.clone();
        while shutdown
            .run_until_cancelled(tokio::time::sleep(Duration::from_secs(1)))
            .await
            .is_some()
        {
            if let Err(e) = self.refresh_all().await {
                tracing::debug!(error = %e, "delta poll failed");
            }
        }
    }

    async fn refresh_all(&self) -> anyhow::Result<()> {
        let hubs: Vec<(ShowId, Arc<ShowHub>)> = match self.shows.lock() {
            Ok(s) => s.iter().map(|(k, v)| (*k, v.clone())).collect(),
            Err(_) => return Ok(()),
        };
        for (show, hub) in hubs {
            // Drop hubs nobody listens to any more.
            if hub.tx.receiver_count() == 0 {
                if let Ok(mut s) = self.shows.lock() {
                    s.remove(&show);
                }
                continue;
            }
            self.advance(show, &hub).await?;
        }
        Ok(())
    }

    /// Reads and broadcasts the deltas after the hub's last seq.
    async fn advance(&self, show: ShowId, hub: &ShowHub) -> anyhow::Result<()> {
        let mut current = hub.last.lock().await;
        loop {
            let deltas = self.read(show, *current, 500).await?;
            let Some(last) = deltas.last().map(|d| d.seq) else {
                return Ok(());
            };
            for d in deltas {
                if d.seq != *current + 1 {
                    // Older deltas were pruned: subscribers resync when they see the jump.
                    tracing::warn!(%show, from = *current, to = d.seq, "delta gap in the table");
                }
                *current = d.seq;
                // Handed to every SSE and gRPC subscriber of the show: the last span of the
                // traces it carries.
                let spans: Vec<tracing::Span> = d
                    .traces
                    .iter()
                    .map(|parent| {
                        let span = tracing::info_span!(target: trace::TARGET, "seat_map.fanout", show = %show, seq = d.seq, subscribers = hub.tx.receiver_count());
                        trace::follow(&span, parent);
                        span
                    })
                    .collect();
                let _ = hub.tx.send(d);
                drop(spans);
            }
            self.note_seq(show, last);
            metrics::gauge!(onsale_telemetry::metrics::SEAT_MAP_SEQ, "show" => onsale_telemetry::metrics::show_label(&show.to_string())).set(last as f64);
        }
    }

    /// Deltas of a show after `after`, at most `limit`, from the table.
    async fn read(&self, show: ShowId, after: i64, limit: i64) -> anyhow::Result<Vec<Arc<Delta>>> {
        let rows = onsale_projections::seat_map::deltas(&self.pool, show, after, limit).await?;
        rows.into_iter()
            .map(|r| {
                let traces = r.traceparents.unwrap_or_default();
                Delta::new(r.seq, r.lsn, r.at, r.body.0, traces).map(Arc::new)
            })
            .collect()
    }

    /// The show's hub; `scheduled`: the show exists even if its projection has no row yet (it
    /// starts at seq 0, as the projection will).
    async fn show_hub(
        &self,
        show: ShowId,
        scheduled: bool,
    ) -> anyhow::Result<Option<Arc<ShowHub>>> {
        if let Some(h) = self.existing(show) {
            return Ok(Some(h));
        }
        let lock = self
            .making
            .lock()
            .map_err(|_| anyhow::anyhow!("hub lock poisoned"))?
            .entry(show)
            .or_default()
            .clone();
        let _making = lock.lock().await;
        let made = self.make_hub(show, scheduled).await;
        if let Ok(mut making) = self.making.lock() {
            making.remove(&show);
        }
        made
    }

    fn existing(&self, show: ShowId) -> Option<Arc<ShowHub>> {
        self.shows.lock().ok()?.get(&show).cloned()
    }

    async fn make_hub(
        &self,
        show: ShowId,
        scheduled: bool,
    ) -> anyhow::Result<Option<Arc<ShowHub>>> {
        if let Some(h) = self.existing(show) {
            return Ok(Some(h));
        }
        let seq = onsale_projections::seat_map::delta_seq(&self.pool, show).await?;
        let seq = match (seq, scheduled) {
            (Some(seq), _) => seq,
            (None, true) => 0,
            (None, false) => return Ok(None),
        };
        self.note_seq(show, seq);
        let mut shows = self
            .shows
            .lock()
            .map_err(|_| anyhow::anyhow!("hub lock poisoned"))?;
        let hub = shows
            .entry(show)
            .or_insert_with(|| {
                Arc::new(ShowHub {
                    tx: broadcast::channel(1024).0,
                    last: tokio::sync::Mutex::new(seq),
                })
            })
            .clone();
        Ok(Some(hub))
    }

    /// Subscribes to a show's deltas after `after` (`None`: only new ones). `Ok(None)` when the
    /// show has no seat map.
    pub async fn subscribe(
        &self,
        show: ShowId,
        after: Option<i64>,
    ) -> anyhow::Result<Option<ReceiverStream<Update>>> {
        self.subscribe_scheduled(show, after, false).await
    }

    /// As [`Hub::subscribe`]; `scheduled`: the show exists (its schedule says so) even if the
    /// projection has not folded it yet: the stream starts at seq 0 and its deltas come as the
    /// projection writes them.
    pub async fn subscribe_scheduled(
        &self,
        show: ShowId,
        after: Option<i64>,
        scheduled: bool,
    ) -> anyhow::Result<Option<ReceiverStream<Update>>> {
        let Some(hub) = self.show_hub(show, scheduled).await? else {
            return Ok(None);
        };
        let mut rx = hub.tx.subscribe();
        let current = *hub.last.lock().await;
        let (out, stream) = mpsc::channel(64);
        let this = self.clone();
        metrics::gauge!(onsale_telemetry::metrics::STREAM_SUBSCRIBERS).increment(1.0);
        self.tasks.spawn(async move {
            let mut last = after.unwrap_or(current).min(current);
            if after.is_some_and(|a| a > current) {
                // A seq from the future (another deployment, a stale client): start over.
                let _ = out
                    .send(Update::Resync {
                        seq: current,
                        reason: "unknown seq",
                    })
                    .await;
            }
            let mut pending: Option<Arc<Delta>> = None;
            // At the start, and after falling behind the channel, the table has what we missed.
            let mut need_fill = true;
            loop {
                if need_fill || pending.as_ref().is_some_and(|d| d.seq > last + 1) {
                    need_fill = false;
                    let upto = pending.as_ref().map_or(i64::MAX, |d| d.seq - 1);
                    match this.fill(show, last, upto, &out).await {
                        Ok(Some(l)) => last = l,
                        Ok(None) => break,
                        Err(_) => {
                            let seq = pending.as_ref().map_or_else(
                                || this.current_seq(show).unwrap_or(last),
                                |d| d.seq - 1,
                            );
                            if out
                                .send(Update::Resync { seq, reason: "gap" })
                                .await
                                .is_err()
                            {
                                break;
                            }
                            last = seq;
                        }
                    }
                }
                if let Some(d) = pending.take() {
                    if d.seq == last + 1 {
                        last = d.seq;
                        if out.send(Update::Delta(d)).await.is_err() {
                            break;
                        }
                    }
                }
                tokio::select! {
                    r = rx.recv() => match r {
                        Ok(d) if d.seq <= last => {}
                        Ok(d) => pending = Some(d),
                        Err(broadcast::error::RecvError::Lagged(_)) => need_fill = true,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    _ = out.closed() => break,
                    _ = this.shutdown.cancelled() => {
                        let _ = out.send(Update::Closing).await;
                        break;
                    }
                }
            }
            metrics::gauge!(onsale_telemetry::metrics::STREAM_SUBSCRIBERS).decrement(1.0);
        });
        Ok(Some(ReceiverStream::new(stream)))
    }

    /// Sends the table's deltas after `last` up to `upto`; `Err` when the table no longer has
    /// the next one (a resync), `Ok(None)` when the subscriber left.
    async fn fill(
        &self,
        show: ShowId,
        mut last: i64,
        upto: i64,
        out: &mpsc::Sender<Update>,
    ) -> anyhow::Result<Option<i64>> {
        loop {
            let deltas = self.read(show, last, 500).await?;
            let mut progressed = false;
            for d in deltas {
                if d.seq > upto {
                    return Ok(Some(last));
                }
                anyhow::ensure!(d.seq == last + 1, "delta {} is no longer kept", last + 1);
                last = d.seq;
                progressed = true;
                if out.send(Update::Delta(d)).await.is_err() {
                    return Ok(None);
                }
            }
            if !progressed {
                return Ok(Some(last));
            }
        }
    }
}
