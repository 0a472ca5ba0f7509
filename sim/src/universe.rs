//! One universe: a show on sale, several command nodes (the real [`Shows`] registry each, with
//! its owners, group commit, claims, leases and fencing) on one shared log, fans sending the
//! real commands, and faults, every choice drawn from one seed. Time is tokio's paused clock on
//! a single thread: a step runs everything that is ready, then time jumps to the next timer,
//! so hours of sweeps, TTLs and timeouts take milliseconds and come out the same every run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use onsale_command::{Answer, ClusterConfig, CommandError, OwnerConfig, Shows};
use onsale_domain::{
    AccountId, Clock, HoldId, Idempotency, IdempotencyKey, OrderId, PaymentFailure, RowLayout,
    SalePolicy, SectionLayout, ShowCommand, ShowId, ShowInfo, VenueId, VenueLayout,
};
use onsale_eventlog::{EventLog, MemoryEventLog};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::link::{Broken, Link, Registrations};
use crate::oracle::Oracle;

/// The size of a universe.
#[derive(Debug, Clone)]
pub struct Config {
    pub nodes: usize,
    pub fans: usize,
    /// Seats in the show's one row: few, so fans fight over them.
    pub seats: u32,
    pub steps: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nodes: 3,
            fans: 6,
            seats: 12,
            steps: 200,
        }
    }
}

/// What one universe did.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// Commands the nodes were sent (each attempt of a client's retries counts).
    pub commands: u64,
    /// Rows the log holds at the end.
    pub rows: i64,
    /// SHA-256 of the trace: equal for two runs of one seed.
    pub hash: String,
    /// The first rule broken, if any.
    pub violation: Option<String>,
    pub trace: Vec<String>,
}

/// The simulation's clock for the domain: a fixed start plus the paused runtime's time.
#[derive(Debug)]
struct SimClock {
    start: DateTime<Utc>,
    origin: Instant,
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        let since = chrono::Duration::from_std(self.origin.elapsed()).unwrap_or_default();
        (self.start + since).trunc_subsecs(6)
    }
}

struct Node {
    shows: Shows,
    link: Link,
    stop: CancellationToken,
    tasks: TaskTracker,
}

/// What the clients were told, waiting to be checked against the log.
#[derive(Default)]
struct Acks {
    holds: Vec<HoldId>,
    orders: Vec<OrderId>,
    released: Vec<HoldId>,
    cancelled: Vec<OrderId>,
}

/// What the fans know: their acknowledged holds and orders (the ids they may act on next).
#[derive(Default)]
struct Known {
    holds: Vec<(HoldId, AccountId)>,
    orders: Vec<(OrderId, AccountId)>,
}

#[derive(Default)]
struct Shared {
    trace: Mutex<Vec<String>>,
    acks: Mutex<Acks>,
    known: Mutex<Known>,
    commands: AtomicU64,
}

impl Shared {
    fn note(&self, line: String) {
        self.trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

/// Runs universe `seed` on a paused single-threaded runtime of its own.
pub fn run(seed: u64, config: &Config) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async { Universe::new(seed, config.clone()).run().await })
}

struct Universe {
    seed: u64,
    config: Config,
    rng: ChaCha8Rng,
    store: MemoryEventLog,
    broken: Broken,
    nodes: Vec<Node>,
    show: ShowId,
    fans: Vec<AccountId>,
    shared: Arc<Shared>,
    clients: Vec<JoinHandle<()>>,
    oracle: Oracle,
    next_id: u128,
    /// Time the step lets pass after it (besides a short pause).
    jump: Duration,
}

const TTL: Duration = Duration::from_secs(2);

impl Universe {
    fn new(seed: u64, config: Config) -> Self {
        let store = MemoryEventLog::default();
        let registrations = Arc::new(Registrations::new(TTL));
        let broken = Broken::default();
        let clock: Arc<dyn Clock> = Arc::new(SimClock {
            start: Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap(),
            origin: Instant::now(),
        });
        let nodes = (0..config.nodes)
            .map(|k| {
                let link = Link::new(store.clone(), registrations.clone(), broken.clone());
                let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
                let shows = Shows::new(
                    Arc::new(link.clone()) as Arc<dyn EventLog>,
                    clock.clone(),
                    owner_config(k),
                    stop.clone(),
                    tasks.clone(),
                );
                Node {
                    shows,
                    link,
                    stop,
                    tasks,
                }
            })
            .collect();
        let fans = (0..config.fans)
            .map(|i| AccountId::parse(&format!("fan-{i}")).expect("an account"))
            .collect();
        Self {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            store,
            broken,
            nodes,
            show: ShowId::new(uuid::Uuid::from_u128(u128::from(seed) + 1)),
            fans,
            shared: Arc::default(),
            clients: Vec::new(),
            oracle: Oracle::default(),
            next_id: 0,
            jump: Duration::ZERO,
            config,
        }
    }

    async fn run(mut self) -> Report {
        let violation = self.play().await.err();
        for node in &self.nodes {
            node.link.reconnect();
            node.stop.cancel();
            node.tasks.close();
        }
        for node in &self.nodes {
            node.tasks.wait().await;
        }
        let trace =
            std::mem::take(&mut *self.shared.trace.lock().unwrap_or_else(|p| p.into_inner()));
        let mut hash = Sha256::new();
        for line in &trace {
            hash.update(line.as_bytes());
            hash.update(b"\n");
        }
        Report {
            seed: self.seed,
            commands: self.shared.commands.load(Ordering::Relaxed),
            rows: self.oracle.seen,
            hash: hex::encode(hash.finalize()),
            violation,
            trace,
        }
    }

    async fn play(&mut self) -> Result<(), String> {
        self.schedule().await?;
        for step in 0..self.config.steps {
            self.step(step);
            let pause = Duration::from_millis(self.rng.random_range(0..300));
            tokio::time::sleep(pause + std::mem::take(&mut self.jump)).await;
            self.check().await?;
        }
        // The end: every node back, every client answered, every lapsed hold swept.
        for node in &self.nodes {
            node.link.reconnect();
            node.link.slow_down(Duration::ZERO);
        }
        for client in std::mem::take(&mut self.clients) {
            let _ = client.await;
        }
        tokio::time::sleep(Duration::from_secs(120)).await;
        self.check().await
    }

    async fn schedule(&mut self) -> Result<(), String> {
        let layout = VenueLayout::parse(vec![SectionLayout {
            section: "S1".into(),
            price_tier: "A".into(),
            rows: vec![RowLayout {
                row: "R1".into(),
                seats: self.config.seats,
            }],
            general_admission: false,
        }])
        .map_err(|e| e.to_string())?;
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let ttl = self.rng.random_range(5..=60);
        let info = ShowInfo {
            show_id: self.show,
            venue_id: VenueId::new(uuid::Uuid::from_u128(u128::from(self.seed) + 2)),
            venue_name: "Hall".into(),
            city: "Oslo".into(),
            name: "Night".into(),
            performer: "Band".into(),
            starts_at: now + chrono::Duration::days(30),
            on_sale_at: now - chrono::Duration::minutes(1),
            prices: BTreeMap::from([("A".to_owned(), 5_000)]),
            waiting_room: false,
            hold_ttl_seconds: ttl,
            policy: SalePolicy {
                max_seats_per_account: Some(4),
                ..SalePolicy::default()
            },
        };
        self.shared.note(format!("schedule ttl={ttl}s"));
        self.nodes[0]
            .shows
            .execute(self.show, ShowCommand::Schedule { info, layout })
            .await
            .map(|_| ())
            .map_err(|e| format!("the show was not scheduled: {e}"))
    }

    fn id(&mut self) -> uuid::Uuid {
        self.next_id += 1;
        uuid::Uuid::from_u128(self.next_id)
    }

    fn step(&mut self, step: usize) {
        let roll = self.rng.random_range(0..100);
        let fan = self.fans[self.rng.random_range(0..self.fans.len())].clone();
        let node = self.rng.random_range(0..self.nodes.len());
        let (holds, orders) = {
            let known = self.shared.known.lock().unwrap_or_else(|p| p.into_inner());
            (known.holds.clone(), known.orders.clone())
        };
        let pick_hold = |rng: &mut ChaCha8Rng| -> Option<(HoldId, AccountId)> {
            (!holds.is_empty()).then(|| holds[rng.random_range(0..holds.len())].clone())
        };
        let pick_order = |rng: &mut ChaCha8Rng| -> Option<(OrderId, AccountId)> {
            (!orders.is_empty()).then(|| orders[rng.random_range(0..orders.len())].clone())
        };
        let command = match roll {
            0..=29 => {
                let n = self.rng.random_range(1..=2);
                let seats = (0..n)
                    .map(|_| format!("S1-R1-{}", self.rng.random_range(1..=self.config.seats)))
                    .collect();
                let keyed = self.rng.random_bool(0.7);
                let idempotency = keyed.then(|| key(&format!("k{}", self.next_id + 1), "hold"));
                ShowCommand::HoldSeats {
                    hold_id: self.hold_id(),
                    account: fan,
                    seat_ids: seats,
                    idempotency,
                }
            }
            30..=34 => ShowCommand::HoldBestAvailable {
                hold_id: self.hold_id(),
                account: fan,
                quantity: self.rng.random_range(1..=2),
                section: None,
                idempotency: Some(key(&format!("k{}", self.next_id + 1), "best")),
            },
            35..=42 => match pick_hold(&mut self.rng) {
                Some((hold_id, account)) => ShowCommand::ReleaseHold { hold_id, account },
                None => return,
            },
            43..=57 => match pick_hold(&mut self.rng) {
                Some((hold_id, account)) => {
                    let order_id = self.order_id(hold_id.show());
                    ShowCommand::PlaceOrder {
                        order_id,
                        hold_id,
                        account,
                        idempotency: key(&format!("o{}", self.next_id), "order"),
                    }
                }
                None => return,
            },
            58..=72 => match pick_order(&mut self.rng) {
                Some((order_id, _)) => match self.rng.random_range(0..10) {
                    0..=5 => ShowCommand::RecordPaymentSucceeded {
                        order_id,
                        amount_cents: None,
                    },
                    6..=8 => ShowCommand::RecordPaymentFailed {
                        order_id,
                        code: PaymentFailure::CardDeclined,
                        reason: "declined".into(),
                    },
                    _ => ShowCommand::RecordPaymentAmbiguous {
                        order_id,
                        reason: "no answer".into(),
                    },
                },
                None => return,
            },
            73..=76 => match pick_order(&mut self.rng) {
                Some((order_id, _)) => ShowCommand::CompensateOrder { order_id },
                None => return,
            },
            77..=80 => match pick_order(&mut self.rng) {
                Some((order_id, account)) => ShowCommand::CancelOrder {
                    order_id,
                    account,
                    admin: false,
                },
                None => return,
            },
            81..=84 => match pick_order(&mut self.rng) {
                Some((order_id, _)) => ShowCommand::RecordRefund {
                    order_id,
                    refund_id: format!("re_{step}"),
                },
                None => return,
            },
            85..=90 => {
                let secs = self.rng.random_range(1..=40);
                self.shared.note(format!("{step} time +{secs}s"));
                self.jump = Duration::from_secs(secs);
                return;
            }
            _ => return self.fault(step),
        };
        self.send(step, node, command);
    }

    fn fault(&mut self, step: usize) {
        let k = self.rng.random_range(0..self.nodes.len());
        let line = match self.rng.random_range(0..5) {
            0 => {
                self.store.refuse_appends(1);
                "the next append is refused".to_owned()
            }
            1 => {
                self.store.lose_append_answers(1);
                "the next append commits and its answer is lost".to_owned()
            }
            2 => {
                let ms = [0, 0, 300, 1_500, 4_000][self.rng.random_range(0..5)];
                self.nodes[k].link.slow_down(Duration::from_millis(ms));
                format!("node {k}'s appends take {ms} ms")
            }
            3 => {
                let connected = self.nodes.iter().filter(|n| !n.link.is_cut()).count();
                if connected < 2 {
                    return;
                }
                self.nodes[k].link.cut();
                format!("node {k} is cut off")
            }
            _ => {
                self.nodes[k].link.reconnect();
                format!("node {k} is back")
            }
        };
        self.shared.note(format!("{step} fault: {line}"));
    }

    fn hold_id(&mut self) -> HoldId {
        let id = self.id();
        format!("h_{}_{}", self.show.uuid().simple(), id.simple())
            .parse()
            .expect("a hold id")
    }

    fn order_id(&mut self, show: ShowId) -> OrderId {
        let id = self.id();
        format!("o_{}_{}", show.uuid().simple(), id.simple())
            .parse()
            .expect("an order id")
    }

    /// A client sends `command` to node `first`; while the answer is "try again" (the node
    /// does not own the show, is cut off, or lost the answer), it tries the next node, as a
    /// client behind a load balancer does. A hold without an idempotency key is sent once: a
    /// retry could hold twice, which a real client avoids by sending a key.
    fn send(&mut self, step: usize, first: usize, command: ShowCommand) {
        let attempts = match &command {
            ShowCommand::HoldSeats {
                idempotency: None, ..
            } => 1,
            _ => 4,
        };
        let label = format!("{step} {}", describe(&command));
        let nodes: Vec<Shows> = self.nodes.iter().map(|n| n.shows.clone()).collect();
        let (shared, show) = (self.shared.clone(), self.show);
        self.clients.push(tokio::spawn(async move {
            let mut outcome = String::new();
            for attempt in 0..attempts {
                let node = (first + attempt) % nodes.len();
                shared.commands.fetch_add(1, Ordering::Relaxed);
                let answer = nodes[node].execute(show, command.clone()).await;
                outcome = match &answer {
                    Ok(a) => {
                        acknowledge(&shared, &command, a);
                        format!("ok {}", answered(a))
                    }
                    Err(CommandError::Domain(e)) => format!("refused: {e}"),
                    Err(e) => format!("{e}"),
                };
                let again = matches!(
                    answer,
                    Err(CommandError::Unavailable
                        | CommandError::Overloaded
                        | CommandError::ShuttingDown)
                );
                if !again {
                    break;
                }
            }
            shared.note(format!("{label} -> {outcome}"));
        }));
    }

    /// Checks the rows the log gained since the last check, then every acknowledgement given
    /// since: each must be in the log.
    async fn check(&mut self) -> Result<(), String> {
        if let Some(v) = self
            .broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(v);
        }
        let rows = self
            .store
            .read_range(&self.show.to_string(), self.oracle.seen, i64::MAX, i64::MAX)
            .await
            .map_err(|e| e.to_string())?;
        self.oracle.check(&rows)?;
        let acks = std::mem::take(&mut *self.shared.acks.lock().unwrap_or_else(|p| p.into_inner()));
        for h in &acks.holds {
            if !self.oracle.has_hold(h) {
                return Err(format!("acknowledged hold {h} is not in the log"));
            }
        }
        for o in &acks.orders {
            if !self.oracle.has_order(o) {
                return Err(format!("acknowledged order {o} is not in the log"));
            }
        }
        for h in &acks.released {
            if !self.oracle.hold_ended(h) {
                return Err(format!("acknowledged release of {h} is not in the log"));
            }
        }
        for o in &acks.cancelled {
            use onsale_domain::OrderStatus as S;
            if !matches!(self.oracle.order_state(o), Some(S::Cancelled | S::Refunded)) {
                return Err(format!(
                    "acknowledged cancellation of {o} is not in the log"
                ));
            }
        }
        Ok(())
    }
}

fn owner_config(node: usize) -> OwnerConfig {
    OwnerConfig {
        max_batch: 64,
        // Snapshots are serialised on a blocking thread, outside the simulated time.
        snapshot_every: i64::MAX,
        snapshot_min_interval: Duration::from_secs(3_600),
        sweep_every: Duration::from_secs(1),
        max_conflict_retries: 5,
        max_queue: 1_000,
        commit_timeout: Duration::from_secs(5),
        cluster: ClusterConfig {
            node_ttl: TTL,
            node_secret: "sim-node-secret".into(),
            // Forwarding between nodes is not simulated: an address no URL can hold makes a
            // forward fail at once, without a lookup or a socket (which would run on the real
            // clock), and the client tries another node. Having an address, the node takes
            // the shows of dead nodes as a deployed one does.
            advertise_addr: Some(format!("sim node {node}")),
            internal_listen: String::new(),
        },
    }
}

fn key(k: &str, what: &str) -> Idempotency {
    Idempotency {
        key: IdempotencyKey::parse(k).expect("a key"),
        fingerprint: what.to_owned(),
    }
}

/// Records what a client was told, for the checks and for the fans' next moves.
fn acknowledge(shared: &Shared, command: &ShowCommand, answer: &Answer) {
    let mut acks = shared.acks.lock().unwrap_or_else(|p| p.into_inner());
    let mut known = shared.known.lock().unwrap_or_else(|p| p.into_inner());
    match (command, answer) {
        (
            ShowCommand::HoldSeats { account, .. } | ShowCommand::HoldBestAvailable { account, .. },
            Answer::Hold(h),
        ) => {
            acks.holds.push(h.hold_id);
            known.holds.push((h.hold_id, account.clone()));
        }
        (ShowCommand::PlaceOrder { account, .. }, Answer::Order(o)) => {
            acks.orders.push(o.order_id);
            known.orders.push((o.order_id, account.clone()));
        }
        (ShowCommand::ReleaseHold { hold_id, .. }, _) => acks.released.push(*hold_id),
        (ShowCommand::CancelOrder { order_id, .. }, _) => acks.cancelled.push(*order_id),
        _ => {}
    }
}

fn describe(command: &ShowCommand) -> String {
    match command {
        ShowCommand::HoldSeats {
            hold_id,
            account,
            seat_ids,
            idempotency,
        } => format!(
            "{account} holds {seat_ids:?} as {} (key {})",
            short(hold_id.to_string()),
            idempotency.as_ref().map_or("none", |i| i.key.as_str())
        ),
        ShowCommand::HoldBestAvailable {
            account, quantity, ..
        } => format!("{account} holds the best {quantity}"),
        ShowCommand::ReleaseHold { hold_id, account } => {
            format!("{account} releases {}", short(hold_id.to_string()))
        }
        ShowCommand::PlaceOrder {
            order_id, hold_id, ..
        } => format!(
            "order {} on {}",
            short(order_id.to_string()),
            short(hold_id.to_string())
        ),
        ShowCommand::RecordPaymentSucceeded { order_id, .. } => {
            format!("capture for {}", short(order_id.to_string()))
        }
        ShowCommand::RecordPaymentFailed { order_id, .. } => {
            format!("decline for {}", short(order_id.to_string()))
        }
        ShowCommand::RecordPaymentAmbiguous { order_id, .. } => {
            format!("no answer for {}", short(order_id.to_string()))
        }
        ShowCommand::CompensateOrder { order_id } => {
            format!("compensate {}", short(order_id.to_string()))
        }
        ShowCommand::CancelOrder { order_id, .. } => {
            format!("cancel {}", short(order_id.to_string()))
        }
        ShowCommand::RecordRefund { order_id, .. } => {
            format!("refund {}", short(order_id.to_string()))
        }
        other => format!("{other:?}"),
    }
}

fn answered(answer: &Answer) -> String {
    match answer {
        Answer::Done => "done".into(),
        Answer::Hold(h) => format!("hold {} {:?}", short(h.hold_id.to_string()), h.seat_ids),
        Answer::Order(o) => format!("order {} {}", short(o.order_id.to_string()), o.status),
    }
}

/// A hold or order id by its own part (the show part is the same throughout): `h1f`.
fn short(id: String) -> String {
    let kind = id.get(..1).unwrap_or("?");
    let own = id.rsplit('_').next().unwrap_or("").trim_start_matches('0');
    format!("{kind}{own}")
}
