//! The runner's own rules on the in-memory log, with no broker and no database (its pool is
//! never connected): which projection is told which event, and which folds are dropped.

use std::sync::Mutex as StdMutex;

use onsale_domain::{HoldId, ShowEvent};
use onsale_eventlog::{LogRow, MemoryEventLog};

use super::*;

/// What a projection was told: the sequences folded into it, the shows unloaded.
#[derive(Debug, Default)]
struct Heard {
    events: Vec<i64>,
    unloaded: Vec<ShowId>,
}

/// A projection that remembers what it was told.
#[derive(Default)]
struct Listener(Arc<StdMutex<Heard>>);

impl Projection for Listener {
    const NAME: &'static str = "listener";

    fn loaded(&mut self, _show_id: ShowId, _show: &Show) {}

    fn unloaded(&mut self, show_id: ShowId) {
        self.0.lock().expect("heard").unloaded.push(show_id);
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        self.0.lock().expect("heard").events.push(ctx.log.sequence);
    }

    async fn flush(&mut self, _tx: &mut PgConnection) -> anyhow::Result<()> {
        Ok(())
    }

    async fn reset(_tx: &mut PgConnection) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Event `sequence` of `show`, as read from the table (a hold that is no longer there expiring:
/// it changes no seat of an empty fold).
fn logged(show: ShowId, sequence: i64) -> LogEvent {
    let event = ShowEvent::HoldExpired {
        hold_id: HoldId::new(show),
    };
    let row = LogRow {
        aggregate_type: "show".into(),
        aggregate_id: show.to_string(),
        sequence,
        event_type: "HoldExpired".into(),
        event_version: "1".into(),
        payload: serde_json::to_string(&event).expect("JSON"),
        metadata: "{}".into(),
        hash: [0; 32],
    };
    LogEvent::from_row(show, &row).expect("a show's row")
}

#[test]
fn each_projection_is_told_only_the_events_past_its_own_position() {
    let (early, late) = (Listener::default(), Listener::default());
    let (early_heard, late_heard) = (early.0.clone(), late.0.clone());
    let mut members: Vec<Box<dyn Member>> = vec![Box::new(early), Box::new(late)];
    let (show_id, mut show) = (ShowId::random(), Show::default());
    for sequence in 1..=4 {
        tell(&mut members, &[0, 2], &mut show, &logged(show_id, sequence));
    }
    assert_eq!(early_heard.lock().expect("heard").events, vec![1, 2, 3, 4]);
    assert_eq!(late_heard.lock().expect("heard").events, vec![3, 4]);
}

#[tokio::test]
async fn an_idle_committed_fold_is_dropped_and_a_busy_or_uncommitted_one_kept() {
    let pool = PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").expect("a lazy pool");
    let listener = Listener::default();
    let heard = listener.0.clone();
    let config = RunnerConfig {
        batch: 10,
        linger_ms: 5,
        tick_ms: 1_000,
        check_ms: 3_000,
        idle_secs: 300,
    };
    let kafka = KafkaConfig::plaintext("127.0.0.1:1", "onsale.events", 1, 1);
    let mut runner = Runner::new(
        pool,
        Arc::new(MemoryEventLog::default()),
        listener,
        kafka,
        config,
    );
    let long_ago = Instant::now()
        .checked_sub(Duration::from_secs(600))
        .expect("an instant ten minutes ago");
    let fold = |last_sequence: i64, stored: i64, touched: Instant| Folded {
        show: Show::default(),
        last_sequence,
        head: [0; 32],
        stored: vec![stored],
        checked_at: last_sequence,
        touched,
    };
    let (idle, uncommitted, busy) = (ShowId::random(), ShowId::random(), ShowId::random());
    runner.shows.insert(idle, fold(7, 7, long_ago));
    runner.shows.insert(uncommitted, fold(7, 5, long_ago));
    runner.shows.insert(busy, fold(7, 7, Instant::now()));
    assert_eq!(runner.drop_idle(Duration::from_secs(300)), 1);
    assert_eq!(runner.folds(), 2);
    assert!(!runner.shows.contains_key(&idle));
    assert_eq!(heard.lock().expect("heard").unloaded, vec![idle]);
}
