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
use onsale_command::{Answer, ClusterConfig, CommandError, Found, OwnerConfig, ShowQuery, Shows};
use onsale_domain::{
    AccountId, Clock, HoldId, Idempotency, IdempotencyKey, OrderId, PaymentFailure, RowLayout,
    SalePolicy, SectionLayout, ShowCommand, ShowError, ShowEvent, ShowId, ShowInfo, VenueId,
    VenueLayout,
};
use onsale_eventlog::{EventLog, MemoryEventLog};
use onsale_telemetry::supervise::{Loops, PartsHealth};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::link::{Broken, Link, Registrations};
use crate::oracle::Oracle;
use crate::payments::{Money, Payment, SimProcessor, CARDS};
use crate::projection::Projected;
use crate::tickets::{Revocation, TicketBook};
use onsale_payments::reconcile::{read_settlement, settle_captures};
use onsale_payments::worker::{webhook_command, Outcome, PaymentState, Step};
use onsale_projections::fold::LogEvent;

mod checks;
mod trace;
mod world;

use trace::{acknowledge, answered, describe, key, short};
use world::{told, Node, Shared};

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
    projected: Projected,
    next_id: u128,
    /// Time the step lets pass after it (besides a short pause).
    jump: Duration,
}

const TTL: Duration = Duration::from_secs(5);

impl Universe {
    fn new(seed: u64, config: Config) -> Self {
        let store = MemoryEventLog::default();
        let registrations = Arc::new(Registrations::new(TTL));
        let broken = Broken::default();
        let clock: Arc<dyn Clock> = Arc::new(SimClock {
            start: Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap(),
            origin: Instant::now(),
        });
        let nodes: Vec<Node> = (0..config.nodes)
            .map(|k| {
                let link = Link::new(store.clone(), registrations.clone(), broken.clone());
                let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
                let shows = Shows::new(
                    Arc::new(link.clone()) as Arc<dyn EventLog>,
                    clock.clone(),
                    owner_config(k),
                    &Loops::new(PartsHealth::default(), stop.clone(), tasks.clone()),
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
        let show = ShowId::new(uuid::Uuid::from_u128(u128::from(seed) + 1));
        let shared = Arc::new(Shared {
            trace: Mutex::default(),
            acks: Mutex::default(),
            known: Mutex::default(),
            money: Arc::default(),
            tickets: Mutex::default(),
            cards: Mutex::default(),
            commands: AtomicU64::new(0),
            nodes: nodes.iter().map(|n: &Node| n.shows.clone()).collect(),
            store: store.clone(),
            show,
            clock,
        });
        Self {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
            store,
            broken,
            nodes,
            show,
            fans,
            shared,
            clients: Vec::new(),
            oracle: Oracle::default(),
            projected: Projected::default(),
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
        self.check().await?;
        // The worker and the webhooks finish their work: every payment resolved, every
        // refund owed made.
        for _ in 0..100 {
            let (payments, refunds, webhooks, settling) = {
                let money = self.shared.money();
                let payments: Vec<OrderId> = money
                    .payments
                    .values()
                    .filter(|p| !p.done)
                    .map(|p| p.order)
                    .collect();
                let refunds: Vec<OrderId> = money
                    .refunds
                    .iter()
                    .filter(|(_, r)| !r.done)
                    .map(|(o, _)| *o)
                    .collect();
                let settling = money.ledger.charges().any(|c| c.resolves_at.is_some());
                (payments, refunds, money.webhooks.len(), settling)
            };
            // The day's file reconciled: a late capture found is recorded (and a refund owed).
            let found = self.shared.reconcile(0).await;
            let unfinished = !self.shared.tickets().unfinished().is_empty();
            if payments.is_empty()
                && refunds.is_empty()
                && webhooks == 0
                && !settling
                && found == 0
                && !unfinished
            {
                break;
            }
            self.shared.finish_cancellations(0).await;
            for order in payments {
                self.shared.pay(0, order).await;
            }
            for order in refunds {
                self.shared.refund(0, order).await;
            }
            let step = self.config.steps;
            self.webhooks(step, 0);
            for client in std::mem::take(&mut self.clients) {
                let _ = client.await;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            self.check().await?;
        }
        // Past the longest hold TTL (60 s): every hold left has lapsed and been swept.
        tokio::time::sleep(Duration::from_secs(65)).await;
        self.check().await?;
        self.settled()
    }

    /// After the drain, the money and the log agree: a confirmed order was captured once and
    /// not refunded; a refunded one was captured and refunded in full; a failed one was never
    /// captured; nothing is left pending or owed.
    fn settled(&self) -> Result<(), String> {
        use onsale_domain::OrderStatus as S;
        let money = self.shared.money();
        if let Some(p) = money.payments.values().find(|p| !p.done) {
            return Err(format!("payment of {} still open after the drain", p.order));
        }
        for (order, state, rows) in self.oracle.orders() {
            let charge = money.ledger.status(&order.to_string());
            let captured = charge.is_some_and(|c| c.captured_at.is_some());
            let refunded = charge.map_or(0, |c| c.refunded_cents);
            let whole = charge.map_or(0, |c| c.amount_cents);
            let ok = match state {
                S::Confirmed => captured && refunded == 0,
                S::Refunded => captured && refunded == whole,
                S::Failed | S::PaymentFailed => !captured,
                S::PendingPayment | S::Cancelled | S::MakeGood => false,
            };
            if !ok {
                return Err(format!(
                    "order {order} ends {state:?} (rows {rows:?}) while the processor has captured={captured}, refunded {refunded} of {whole}"
                ));
            }
            let ticketed = self.shared.tickets().seats_of(&order.to_string());
            if state == S::Confirmed && ticketed != self.oracle.order_seats(order) {
                return Err(format!(
                    "order {order} is confirmed with {ticketed} tickets for {} seats",
                    self.oracle.order_seats(order)
                ));
            }
        }
        Ok(())
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
            currency: Default::default(),
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
            43..=55 => match pick_hold(&mut self.rng) {
                Some((hold_id, account)) => {
                    let order_id = self.order_id(hold_id.show());
                    // The card the fan pays with, and when a pending charge settles.
                    let card = CARDS[self.rng.random_range(0..CARDS.len())];
                    let settle = chrono::Duration::seconds(self.rng.random_range(1..=60));
                    self.shared
                        .cards
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(order_id, (card, settle));
                    ShowCommand::PlaceOrder {
                        order_id,
                        hold_id,
                        account,
                        idempotency: key(&format!("o{}", self.next_id), "order"),
                    }
                }
                None => return,
            },
            56..=69 => return self.worker_round(step, node),
            70..=73 => return self.webhooks(step, node),
            74..=77 => match pick_order(&mut self.rng) {
                Some((order, account)) => return self.cancel(step, node, order, account),
                None => return,
            },
            78..=80 => return self.refund_round(step, node),
            81..=83 => return self.scan(step),
            84..=85 => return self.reconcile_round(step, node),
            86..=88 => {
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
        let line = match self.rng.random_range(0..6) {
            5 => {
                self.shared.money().lose_answers += 1;
                "the processor's next answer is lost".to_owned()
            }
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
        let shared = self.shared.clone();
        self.clients.push(tokio::spawn(async move {
            let answer = shared.deliver(first, attempts, &command).await;
            if let (_, Ok(a)) = &answer {
                acknowledge(&shared, &command, a);
            }
            shared.note(format!("{label} -> {}", told(&answer)));
        }));
    }

    /// The payment worker takes one payment that is due (none taken by another round).
    fn worker_round(&mut self, step: usize, first: usize) {
        let due: Vec<OrderId> = {
            let money = self.shared.money();
            money
                .payments
                .values()
                .filter(|p| !p.done && !p.busy)
                .map(|p| p.order)
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let order = due[self.rng.random_range(0..due.len())];
        if let Some(p) = self.shared.money().payments.get_mut(&order) {
            p.busy = true;
        }
        self.shared.note(format!("{step} worker round"));
        let shared = self.shared.clone();
        self.clients
            .push(tokio::spawn(async move { shared.pay(first, order).await }));
    }

    /// Some of the webhook events raised so far reach the endpoint, in any order, one of them
    /// perhaps twice (processors deliver at least once).
    fn webhooks(&mut self, step: usize, first: usize) {
        let mut events = std::mem::take(&mut self.shared.money().webhooks);
        if events.is_empty() {
            return;
        }
        // Fisher-Yates from the seed: the delivery order.
        for i in (1..events.len()).rev() {
            events.swap(i, self.rng.random_range(0..=i));
        }
        let keep = self.rng.random_range(0..events.len());
        let later = events.split_off(keep);
        if let Some(again) = events
            .first()
            .cloned()
            .filter(|_| self.rng.random_bool(0.3))
        {
            events.push(again);
        }
        self.shared.money().webhooks.extend(later);
        self.shared
            .note(format!("{step} {} webhooks delivered", events.len()));
        let shared = self.shared.clone();
        self.clients.push(tokio::spawn(async move {
            for event in events {
                let Some((_, command)) = webhook_command(&event) else {
                    continue;
                };
                let answer = shared.deliver(first, 4, &command).await;
                shared.note(format!(
                    "webhook {} {} -> {}",
                    event.kind,
                    short(event.reference.clone()),
                    told(&answer)
                ));
            }
        }));
    }

    /// A fan cancels a paid order as the API does: the domain's rule asked first, then the
    /// tickets revoked (refused if one was scanned), then `CancelOrder`, then remembered.
    fn cancel(&mut self, step: usize, first: usize, order: OrderId, account: AccountId) {
        let shared = self.shared.clone();
        self.clients.push(tokio::spawn(async move {
            let label = format!("{step} {account} cancels {}", short(order.to_string()));
            let query = ShowQuery::Cancellable {
                order,
                account: account.clone(),
                admin: false,
            };
            match shared.ask(first, 4, query).await {
                Ok(Found::Cancellable(_)) => {}
                Err(CommandError::Domain(e)) => {
                    return shared.note(format!("{label} -> refused: {e}"));
                }
                other => return shared.note(format!("{label} -> {other:?}")),
            }
            let revoked = shared
                .tickets()
                .revoke_for_cancel(&order.to_string(), account.as_str());
            if let Revocation::AlreadyScanned(seat) = revoked {
                return shared.note(format!("{label} -> refused: {seat}'s ticket was scanned"));
            }
            let command = ShowCommand::CancelOrder {
                order_id: order,
                account,
                admin: false,
            };
            let answer = shared.deliver(first, 4, &command).await;
            if let (_, Ok(a)) = &answer {
                acknowledge(&shared, &command, a);
                shared.tickets().recorded(&order.to_string());
            }
            shared.note(format!("{label} -> {}", told(&answer)));
        }));
    }

    /// The settlement reconciliation of the day (`onsale_payments::reconcile::settle_captures`,
    /// the job's direction one) against the processor's file.
    fn reconcile_round(&mut self, step: usize, first: usize) {
        self.shared.note(format!("{step} reconciliation"));
        let shared = self.shared.clone();
        self.clients.push(tokio::spawn(async move {
            shared.reconcile(first).await;
        }));
    }

    /// The gate scans one issued ticket (perhaps revoked, perhaps scanned already).
    fn scan(&mut self, step: usize) {
        let issued = self.shared.tickets().issued();
        if issued.is_empty() {
            return;
        }
        let (order, seat) = &issued[self.rng.random_range(0..issued.len())];
        let admitted = self.shared.tickets().scan(order, seat);
        self.shared.note(format!(
            "{step} gate scans {}'s {seat}: {}",
            short(order.clone()),
            if admitted { "admitted" } else { "refused" }
        ));
    }

    /// The worker takes the refunds that are owed, and the job finishes the cancellations
    /// interrupted after their tickets were revoked (`finish_cancellations`).
    fn refund_round(&mut self, step: usize, first: usize) {
        if !self.shared.tickets().unfinished().is_empty() {
            let shared = self.shared.clone();
            self.clients.push(tokio::spawn(async move {
                shared.finish_cancellations(first).await;
            }));
        }
        let owed: Vec<OrderId> = {
            let mut money = self.shared.money();
            money
                .refunds
                .iter_mut()
                .filter(|(_, r)| !r.done && !r.busy)
                .map(|(o, r)| {
                    r.busy = true;
                    *o
                })
                .collect()
        };
        if owed.is_empty() {
            return;
        }
        self.shared.note(format!("{step} refund round"));
        let shared = self.shared.clone();
        self.clients.push(tokio::spawn(async move {
            for order in owed {
                shared.refund(first, order).await;
            }
        }));
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
