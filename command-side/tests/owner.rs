//! The owner's group commit, conflict, failure and shutdown paths on the in-memory event log
//! (its faults switched on): no PostgreSQL, so each path is driven exactly. The tests of
//! leases and bounds run on the runtime's paused clock (the lease, the commit bound and the
//! heartbeats are the runtime's time), so they take no wall time and no wall clock decides
//! them. The same paths run
//! against PostgreSQL in the integration tests (`tests/tests/store.rs`, `concurrency.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use onsale_command::{Answer, ClusterConfig, CommandError, OwnerConfig, Shows};
use onsale_domain::{
    AccountId, HoldId, Idempotency, IdempotencyKey, OrderId, PaymentFailure, RowLayout,
    SectionLayout, ShowCommand, ShowError, ShowId, ShowInfo, SystemClock, VenueId, VenueLayout,
};
use onsale_eventlog::{EventLog, MemoryDirectory, MemoryEventLog, ShardedLog};
use onsale_telemetry::supervise::{Loops, PartsHealth};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

struct Process {
    shows: Shows,
    stop: CancellationToken,
    tasks: TaskTracker,
}

fn config() -> OwnerConfig {
    config_with_ttl(Duration::from_secs(5))
}

fn config_with_ttl(node_ttl: Duration) -> OwnerConfig {
    OwnerConfig {
        max_batch: 512,
        snapshot_every: 10_000,
        snapshot_min_interval: Duration::from_secs(10),
        sweep_every: Duration::from_secs(3_600),
        max_conflict_retries: 5,
        max_queue: 1_000,
        commit_timeout: Duration::from_secs(5),
        cluster: ClusterConfig {
            node_ttl,
            node_secret: "test-node-secret".into(),
            advertise_addr: None,
            internal_listen: "127.0.0.1:0".into(),
        },
    }
}

/// One process's owners on `log`.
fn process(log: &MemoryEventLog) -> Process {
    process_with(log, config())
}

fn process_with(log: &MemoryEventLog, config: OwnerConfig) -> Process {
    let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
    let shows = Shows::new(
        Arc::new(log.clone()),
        Arc::new(SystemClock),
        config,
        &Loops::new(PartsHealth::default(), stop.clone(), tasks.clone()),
    );
    Process { shows, stop, tasks }
}

/// A show of 100 seats (S1-R1-1 .. S1-R1-100) on sale now.
async fn on_sale(shows: &Shows) -> ShowId {
    on_sale_with(shows, 1, 100, 600).await
}

fn hold(show: ShowId, fan: &str, seat: u32, key: Option<&str>) -> ShowCommand {
    ShowCommand::HoldSeats {
        hold_id: HoldId::new(show),
        account: AccountId::parse(fan).expect("account"),
        seat_ids: vec![format!("S1-R1-{seat}")],
        idempotency: key.map(|k| Idempotency {
            key: IdempotencyKey::parse(k).expect("key"),
            fingerprint: format!("fp-{fan}-{seat}"),
        }),
    }
}

fn held(answer: Result<Answer, CommandError>) -> HoldId {
    match answer {
        Ok(Answer::Hold(view)) => view.hold_id,
        other => panic!("expected a hold, got {other:?}"),
    }
}

type Pending = tokio::task::JoinHandle<Result<Answer, CommandError>>;

/// One hold per seat of `seats`, each by its own fan, sent from tasks of their own.
fn holds_in_background(
    shows: &Shows,
    show: ShowId,
    seats: std::ops::RangeInclusive<u32>,
) -> Vec<Pending> {
    seats
        .map(|n| {
            let shows = shows.clone();
            tokio::spawn(async move {
                shows
                    .execute(show, hold(show, &format!("fan-{n}"), n, None))
                    .await
            })
        })
        .collect()
}

/// Lets every other task of this (single-threaded) runtime run until it waits.
async fn settle() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn commands_taken_while_an_append_is_in_flight_commit_together() {
    let log = MemoryEventLog::default();
    let p = process(&log);
    let show = on_sale(&p.shows).await;
    let before = log.appends();
    log.hold_appends().await;
    let first = {
        let shows = p.shows.clone();
        tokio::spawn(async move { shows.execute(show, hold(show, "fan-0", 1, None)).await })
    };
    settle().await;
    let rest = holds_in_background(&p.shows, show, 2..=21);
    settle().await;
    assert!(
        !first.is_finished(),
        "nothing is answered before its append commits"
    );
    log.release_appends();
    held(first.await.expect("task"));
    for r in rest {
        held(r.await.expect("task"));
    }
    assert_eq!(
        log.appends() - before,
        2,
        "the first hold alone, then the twenty decided during its append in one"
    );
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(replayed.holds().count(), 21);
}

/// Sends `command` until its answer is what `wanted` accepts (at most 10 s).
async fn until_answer(
    shows: &Shows,
    show: ShowId,
    command: impl Fn() -> ShowCommand,
    wanted: impl Fn(&Result<Answer, CommandError>) -> bool,
) -> Result<Answer, CommandError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = shows.execute(show, command()).await;
        if wanted(&answer) || tokio::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn made_up_ids_of_a_show_are_answered_without_its_queue_and_real_holds_go_on() {
    let log = MemoryEventLog::default();
    let a = process(&log);
    let show = on_sale(&a.shows).await;
    let real = held(a.shows.execute(show, hold(show, "ann", 1, None)).await);
    // More made-up releases than the owner's queue holds (1,000), all sent before the owner
    // runs (this runtime has one thread): each is answered 404 without a queue slot.
    let bogus: Vec<_> = (0..1_500)
        .map(|_| {
            let shows = a.shows.clone();
            tokio::spawn(async move {
                let account = AccountId::parse("bot").expect("account");
                let release = ShowCommand::ReleaseHold {
                    hold_id: HoldId::new(show),
                    account,
                };
                shows.execute(show, release).await
            })
        })
        .collect();
    let fans = holds_in_background(&a.shows, show, 2..=40);
    for b in bogus {
        match b.await.expect("joins") {
            Err(CommandError::Domain(ShowError::HoldNotFound)) => {}
            other => panic!("a made-up hold is not found, got {other:?}"),
        }
    }
    for f in fans {
        held(f.await.expect("joins"));
    }
    // A real hold, just made, is known at once: its release reaches the owner.
    let fresh = held(a.shows.execute(show, hold(show, "bea", 50, None)).await);
    for (id, fan) in [(real, "ann"), (fresh, "bea")] {
        let release = ShowCommand::ReleaseHold {
            hold_id: id,
            account: AccountId::parse(fan).expect("account"),
        };
        assert!(matches!(
            a.shows.execute(show, release).await,
            Ok(Answer::Done)
        ));
    }
    // Orders the show never had: the cancellation's check is answered without the queue too.
    let unknown = onsale_domain::OrderId::new(show);
    let ask = onsale_command::ShowQuery::Cancellable {
        order: unknown,
        account: AccountId::parse("bot").expect("account"),
        admin: false,
    };
    assert!(matches!(
        a.shows.ask(show, ask).await,
        Err(CommandError::Domain(ShowError::OrderNotFound))
    ));
}

#[tokio::test(start_paused = true)]
async fn an_owner_that_cannot_prove_its_lease_answers_nothing_not_even_a_refusal() {
    let log = MemoryEventLog::default();
    let a = process_with(&log, config_with_ttl(Duration::from_millis(500)));
    let show = on_sale(&a.shows).await;
    held(a.shows.execute(show, hold(show, "ann", 1, None)).await);
    let taken = |a: &Result<Answer, CommandError>| {
        matches!(
            a,
            Err(CommandError::Domain(ShowError::SeatUnavailable { .. }))
        )
    };
    assert!(taken(
        &a.shows.execute(show, hold(show, "bob", 1, None)).await
    ));
    // Cut off from the database: once the lease's TTL has run out another node may have the
    // show, so the refusal from this (possibly stale) state is not given.
    log.fail_heartbeats(true);
    let answer = until_answer(
        &a.shows,
        show,
        || hold(show, "bob", 1, None),
        |a| matches!(a, Err(CommandError::Unavailable)),
    )
    .await;
    assert!(
        matches!(answer, Err(CommandError::Unavailable)),
        "{answer:?}"
    );
    assert!(!a.shows.lease_held());
    // A heartbeat proves the lease again: the owner answers from its state again.
    log.fail_heartbeats(false);
    let answer = until_answer(&a.shows, show, || hold(show, "bob", 1, None), taken).await;
    assert!(taken(&answer), "{answer:?}");
}

#[tokio::test]
async fn an_owner_whose_show_another_node_claimed_is_fenced_and_writes_nothing() {
    let log = MemoryEventLog::default();
    let (a, b) = (process(&log), process(&log));
    let show = on_sale(&a.shows).await;
    held(a.shows.execute(show, hold(show, "ann", 1, None)).await);
    // While a lives, b does not take the show (it would forward to a; this test has no HTTP).
    assert!(matches!(
        b.shows.execute(show, hold(show, "bob", 2, None)).await,
        Err(CommandError::Unavailable)
    ));
    // a is presumed dead (paused past its TTL): b claims the show and decides on it.
    log.presume_dead(a.shows.node().id);
    held(b.shows.execute(show, hold(show, "bob", 2, None)).await);
    // a wakes with its stale state: what it decides is fenced, never written; its caller is
    // not acknowledged (the show's owner answers the retry).
    assert!(matches!(
        a.shows.execute(show, hold(show, "cat", 2, None)).await,
        Err(CommandError::Unavailable)
    ));
    match b.shows.execute(show, hold(show, "dan", 2, None)).await {
        Err(CommandError::Domain(ShowError::SeatUnavailable { .. })) => {}
        other => panic!("seat 2 is bob's, got {other:?}"),
    }
    held(b.shows.execute(show, hold(show, "dan", 3, None)).await);
    let replayed = log.replay(show).await.expect("replay").show;
    let accounts: Vec<String> = replayed
        .holds()
        .map(|(_, h)| h.account.to_string())
        .collect();
    assert_eq!(
        accounts.len(),
        3,
        "ann, bob and dan; cat's fenced decision nowhere: {accounts:?}"
    );
    assert!(!accounts.iter().any(|a| a == "cat"));
}

#[tokio::test]
async fn a_refused_append_acknowledges_nothing_and_the_retry_commits_once() {
    let log = MemoryEventLog::default();
    let p = process(&log);
    let show = on_sale(&p.shows).await;
    log.refuse_appends(1);
    match p
        .shows
        .execute(show, hold(show, "ann", 1, Some("k1")))
        .await
    {
        Err(CommandError::Unavailable) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let id = held(
        p.shows
            .execute(show, hold(show, "ann", 1, Some("k1")))
            .await,
    );
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(replayed.holds().count(), 1);
    assert!(replayed.hold(&id).is_some());
}

/// Found by the simulator (seed 43): a refusal answered at once, decided on a batch whose
/// append then failed, is an answer the log contradicts, and the payment worker closes a
/// payment on it. An order's refusal waits for the batch instead, and is decided again.
#[tokio::test]
async fn an_order_refusal_decided_on_an_uncommitted_batch_waits_for_it_and_is_decided_again() {
    let log = MemoryEventLog::default();
    let p = process(&log);
    let show = on_sale(&p.shows).await;
    let hold_id = held(p.shows.execute(show, hold(show, "ann", 1, None)).await);
    let order_id = OrderId::new(show);
    p.shows
        .execute(
            show,
            ShowCommand::PlaceOrder {
                order_id,
                hold_id,
                account: AccountId::parse("ann").expect("account"),
                idempotency: Idempotency {
                    key: IdempotencyKey::parse("o1").expect("key"),
                    fingerprint: "fp-order".into(),
                },
            },
        )
        .await
        .expect("ordered");
    log.hold_appends().await;
    log.refuse_appends(1);
    let shows = p.shows.clone();
    let capture = tokio::spawn(async move {
        let c = ShowCommand::RecordPaymentSucceeded {
            order_id,
            amount_cents: None,
        };
        shows.execute(show, c).await
    });
    settle().await;
    // A decline decided on the uncommitted capture is refused (a confirmed order does not fail):
    // held back until the capture's append is answered.
    let shows = p.shows.clone();
    let decline = tokio::spawn(async move {
        let c = ShowCommand::RecordPaymentFailed {
            order_id,
            code: PaymentFailure::CardDeclined,
            reason: "declined".into(),
        };
        shows.execute(show, c).await
    });
    settle().await;
    assert!(
        !decline.is_finished(),
        "a refusal went out before the batch it was decided on committed"
    );
    log.release_appends();
    match capture.await.expect("capture") {
        Err(CommandError::Unavailable) => {}
        other => panic!("the capture's append was refused: expected Unavailable, got {other:?}"),
    }
    // The capture never reached the log: the decline, decided again, is recorded.
    decline
        .await
        .expect("decline")
        .expect("the decline is recorded");
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(
        replayed.order(&order_id).map(|o| o.state.public_status()),
        Some("FAILED")
    );
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_found_by_its_retry() {
    let log = MemoryEventLog::default();
    let p = process(&log);
    let show = on_sale(&p.shows).await;
    log.lose_append_answers(1);
    match p
        .shows
        .execute(show, hold(show, "ann", 1, Some("k1")))
        .await
    {
        Err(CommandError::Unavailable) => {}
        other => panic!("an unanswered commit is never acknowledged, got {other:?}"),
    }
    // The hold did commit: the retry with the same key gets it, not a second one.
    let retried = held(
        p.shows
            .execute(show, hold(show, "ann", 1, Some("k1")))
            .await,
    );
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(replayed.holds().count(), 1);
    assert!(replayed.hold(&retried).is_some());
}

/// A primary whose synchronous standbys are all gone holds every commit: the caller is answered
/// `Unavailable` once the bound passes, nothing is acknowledged, and when the commit lands
/// after all the retry with the same key finds it.
#[tokio::test(start_paused = true)]
async fn a_commit_held_past_the_bound_is_unavailable_and_its_retry_finds_it() {
    let log = MemoryEventLog::default();
    let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
    let shows = Shows::new(
        Arc::new(log.clone()),
        Arc::new(SystemClock),
        OwnerConfig {
            commit_timeout: Duration::from_millis(200),
            ..config()
        },
        &Loops::new(PartsHealth::default(), stop.clone(), tasks.clone()),
    );
    let show = on_sale(&shows).await;
    log.hold_appends().await;
    let started = tokio::time::Instant::now();
    let first = tokio::time::timeout(
        Duration::from_secs(10),
        shows.execute(show, hold(show, "ann", 1, Some("k1"))),
    )
    .await
    .expect("the caller is answered within its bound, not held with the commit");
    match first {
        Err(CommandError::Unavailable) => {}
        other => panic!("a held commit is never acknowledged, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));
    let before = log.appends();
    // The standby returns: the held append commits, and the retry is answered with it.
    log.release_appends();
    let retried = held(shows.execute(show, hold(show, "ann", 1, Some("k1"))).await);
    assert_eq!(log.appends(), before + 1, "the retry appended nothing");
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(replayed.holds().count(), 1);
    assert!(replayed.hold(&retried).is_some());
}

#[tokio::test]
async fn shutdown_answers_what_was_taken_then_refuses_and_the_owners_stop() {
    let log = MemoryEventLog::default();
    let p = process(&log);
    let show = on_sale(&p.shows).await;
    log.hold_appends().await;
    let taken = holds_in_background(&p.shows, show, 1..=10);
    settle().await;
    p.stop.cancel();
    match p.shows.execute(show, hold(show, "late", 50, None)).await {
        Err(CommandError::ShuttingDown) => {}
        other => panic!("a command after shutdown is refused, got {other:?}"),
    }
    log.release_appends();
    for t in taken {
        held(t.await.expect("task"));
    }
    p.tasks.close();
    tokio::time::timeout(Duration::from_secs(5), p.tasks.wait())
        .await
        .expect("every owner and append stops");
    let replayed = log.replay(show).await.expect("replay").show;
    assert_eq!(
        replayed.holds().count(),
        10,
        "what was taken, not the late one"
    );
}

/// A show of `rows` rows of `seats` seats (S1-R1-1 ..), on sale now, its holds lapsing after
/// `ttl_secs`.
async fn on_sale_with(shows: &Shows, rows: u32, seats: u32, ttl_secs: u32) -> ShowId {
    let show = ShowId::random();
    schedule(shows, show, rows, seats, ttl_secs).await;
    show
}

/// Schedules `show`, on sale now, of one section of `rows` rows of `seats` seats.
async fn schedule(shows: &Shows, show: ShowId, rows: u32, seats: u32, ttl_secs: u32) {
    let layout = VenueLayout::parse(vec![SectionLayout {
        section: "S1".into(),
        price_tier: "A".into(),
        rows: (1..=rows)
            .map(|r| RowLayout {
                row: format!("R{r}"),
                seats,
            })
            .collect(),
        general_admission: false,
    }])
    .expect("layout");
    let now = Utc::now();
    let info = ShowInfo {
        show_id: show,
        venue_id: VenueId::random(),
        venue_name: "Hall".into(),
        city: "Oslo".into(),
        name: "Night".into(),
        performer: "Band".into(),
        starts_at: now + chrono::Duration::days(30),
        on_sale_at: now - chrono::Duration::minutes(1),
        prices: BTreeMap::from([("A".to_owned(), 5_000)]),
        currency: Default::default(),
        waiting_room: false,
        hold_ttl_seconds: ttl_secs,
        policy: Default::default(),
    };
    shows
        .execute(show, ShowCommand::Schedule { info, layout })
        .await
        .expect("scheduled");
}

/// Two write clusters (docs/adr/021): each show's log goes to its shard only, and a shard whose
/// heartbeats fail stops its own shows' owners once the lease on it lapses while the other
/// shard's shows sell on; they answer again when the shard does.
#[tokio::test(start_paused = true)]
async fn a_shard_cut_off_stops_only_its_own_owners() {
    let (one, two) = (MemoryEventLog::default(), MemoryEventLog::default());
    let first_shard: Arc<dyn EventLog> = Arc::new(one.clone());
    let log = ShardedLog::new(first_shard, Arc::new(MemoryDirectory::default()))
        .and(Arc::new(two.clone()));
    let shows = Shows::sharded(
        Arc::new(log),
        Arc::new(SystemClock),
        config_with_ttl(Duration::from_millis(500)),
        &Loops::alone(CancellationToken::new()),
    );
    let (first, second) = (ShowId::random(), ShowId::random());
    let placed =
        |shard: Result<onsale_eventlog::ShardId, CommandError>| shard.ok().map(|s| s.get());
    assert_eq!(placed(shows.place(first, Some(1)).await), Some(1));
    assert_eq!(placed(shows.place(second, None).await), Some(2));
    assert!(matches!(
        shows.place(ShowId::random(), Some(3)).await,
        Err(CommandError::Domain(ShowError::Invalid(_)))
    ));
    schedule(&shows, first, 1, 100, 600).await;
    schedule(&shows, second, 1, 100, 600).await;
    held(shows.execute(first, hold(first, "ann", 1, None)).await);
    held(shows.execute(second, hold(second, "ann", 1, None)).await);
    assert_eq!((one.appends(), two.appends()), (2, 2));

    one.fail_heartbeats(true);
    let answer = until_answer(
        &shows,
        first,
        || hold(first, "bob", 2, None),
        |a| matches!(a, Err(CommandError::Unavailable)),
    )
    .await;
    assert!(
        matches!(answer, Err(CommandError::Unavailable)),
        "{answer:?}"
    );
    let shard = |n| shows.shards().shard_id(n).expect("a shard");
    assert!(!shows.lease_held_on(shard(1)));
    assert!(shows.lease_held_on(shard(2)));
    for n in 2..=10 {
        held(
            shows
                .execute(second, hold(second, &format!("fan-{n}"), n, None))
                .await,
        );
    }
    one.fail_heartbeats(false);
    let answer = until_answer(
        &shows,
        first,
        || hold(first, "cat", 50, None),
        |a| a.is_ok(),
    )
    .await;
    held(answer);

    // A shard that stops answering (its primary killed with connections open) rather than
    // refusing: its heartbeats hang. The other shard's lease is renewed on a beat of its own,
    // so its shows sell on through several lease lengths.
    one.hang_heartbeats(true);
    let answer = until_answer(
        &shows,
        first,
        || hold(first, "dan", 60, None),
        |a| matches!(a, Err(CommandError::Unavailable)),
    )
    .await;
    assert!(
        matches!(answer, Err(CommandError::Unavailable)),
        "{answer:?}"
    );
    let through = tokio::time::Instant::now() + Duration::from_millis(1_500);
    let mut n = 11;
    while tokio::time::Instant::now() < through {
        held(
            shows
                .execute(second, hold(second, &format!("fan-{n}"), n, None))
                .await,
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(shows.lease_held_on(shard(2)));
    one.hang_heartbeats(false);
    let answer = until_answer(
        &shows,
        first,
        || hold(first, "eve", 70, None),
        |a| a.is_ok(),
    )
    .await;
    held(answer);
}

/// On the wall clock, on purpose: a rush that keeps the queue full never lets a paused clock
/// advance (it only moves when every task waits), and what this pins is that the owner's real
/// work keeps up with its sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_short_holds_is_swept_within_a_tick_while_the_queue_never_empties() {
    let log = MemoryEventLog::default();
    let mut c = config();
    c.sweep_every = Duration::from_millis(500);
    let p = process_with(&log, c);
    // Four sweeps' worth of holds, lapsing together.
    let show = on_sale_with(&p.shows, 4, 500, 1).await;
    let mut ids = Vec::new();
    // In waves of a row: the owner's queue holds 1,000.
    for row in 1..=4u32 {
        let pending: Vec<Pending> = (1..=500u32)
            .map(|n| {
                let shows = p.shows.clone();
                tokio::spawn(async move {
                    let command = ShowCommand::HoldSeats {
                        hold_id: HoldId::new(show),
                        account: AccountId::parse(&format!("fan{row}x{n}")).expect("account"),
                        seat_ids: vec![format!("S1-R{row}-{n}")],
                        idempotency: None,
                    };
                    shows.execute(show, command).await
                })
            })
            .collect();
        for h in pending {
            ids.push(held(h.await.expect("task")));
        }
    }
    let lapse = std::time::Instant::now() + Duration::from_secs(1);
    // A rush that keeps the owner's queue full: holds of a seat someone already holds.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rush: Vec<_> = (0..64)
        .map(|i| {
            let (shows, stop) = (p.shows.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = shows
                        .execute(show, hold(show, &format!("rush{i}"), 1 + n % 7, None))
                        .await;
                    n += 1;
                }
            })
        })
        .collect();
    // Every hold expired in the log within a tick and a second of lapsing (four chunks: the
    // sweep does not wait a tick between them, nor for the queue to empty).
    let mut swept = false;
    while std::time::Instant::now() < lapse + Duration::from_millis(1_500) {
        let replayed = log.replay(show).await.expect("replay").show;
        if ids.iter().all(|h| {
            replayed
                .hold_view(h)
                .is_some_and(|v| v.state == onsale_domain::HoldStatus::Expired)
        }) {
            swept = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in rush {
        r.await.expect("a rusher stops");
    }
    assert!(swept, "2,000 lapsed holds not all expired within 1.5 s");
    p.stop.cancel();
    p.tasks.close();
    p.tasks.wait().await;
}
