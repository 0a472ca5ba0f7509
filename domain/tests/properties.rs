//! Property tests: any interleaving of holds, orders, payments, sweeps, clock jumps, retries,
//! crashes (rebuild from the log) and snapshot round trips keeps the invariants.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, TimeZone, Utc};
use onsale_domain::show::Seat;
use onsale_domain::*;
use proptest::prelude::*;

const ACCOUNTS: [&str; 3] = ["ann", "bob", "cat"];
/// Reserved seats (section A), then the units of the general-admission floor F.
const SEATS: usize = 12;
const GA: usize = 7;

#[derive(Debug, Clone)]
enum Op {
    Hold {
        who: usize,
        seats: Vec<usize>,
        keyed: bool,
    },
    Best {
        who: usize,
        quantity: u32,
        /// From the general-admission floor (a quantity of it), else the best seats.
        ga: bool,
    },
    Release {
        who: usize,
        pick: usize,
    },
    Order {
        who: usize,
        pick: usize,
    },
    Pay {
        pick: usize,
        outcome: u8,
    },
    Compensate {
        pick: usize,
    },
    Cancel {
        who: usize,
        pick: usize,
    },
    Refund {
        pick: usize,
    },
    Sweep,
    Tick {
        secs: i64,
    },
    Retry,
    Crash,
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, prop::collection::vec(0..SEATS + GA, 1..4), any::<bool>())
            .prop_map(|(who, seats, keyed)| Op::Hold { who, seats, keyed }),
        3 => (0..3usize, 1..4u32, any::<bool>())
            .prop_map(|(who, quantity, ga)| Op::Best { who, quantity, ga }),
        1 => (0..3usize, any::<usize>()).prop_map(|(who, pick)| Op::Release { who, pick }),
        3 => (0..3usize, any::<usize>()).prop_map(|(who, pick)| Op::Order { who, pick }),
        3 => (any::<usize>(), 0..3u8).prop_map(|(pick, outcome)| Op::Pay { pick, outcome }),
        1 => any::<usize>().prop_map(|pick| Op::Compensate { pick }),
        1 => (0..3usize, any::<usize>()).prop_map(|(who, pick)| Op::Cancel { who, pick }),
        1 => any::<usize>().prop_map(|pick| Op::Refund { pick }),
        1 => Just(Op::Sweep),
        2 => (0..400i64).prop_map(|secs| Op::Tick { secs }),
        1 => Just(Op::Retry),
        1 => Just(Op::Crash),
        1 => Just(Op::Snapshot),
    ]
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .single()
        .expect("valid time")
}

fn schedule(show: ShowId) -> ShowCommand {
    let layout = VenueLayout::parse(vec![
        SectionLayout {
            section: "A".into(),
            price_tier: "P".into(),
            rows: vec![
                RowLayout {
                    row: "1".into(),
                    seats: 6,
                },
                RowLayout {
                    row: "2".into(),
                    seats: 6,
                },
            ],
            general_admission: false,
        },
        SectionLayout::general_admission("F".into(), "P".into(), GA as u32),
    ])
    .expect("layout");
    ShowCommand::Schedule {
        info: ShowInfo {
            show_id: show,
            venue_id: VenueId::random(),
            venue_name: "Hall".into(),
            city: "Oslo".into(),
            name: "Night".into(),
            performer: "Band".into(),
            starts_at: t0() + Duration::days(10),
            on_sale_at: t0(),
            prices: BTreeMap::from([("P".to_string(), 1_000)]),
            currency: Default::default(),
            waiting_room: false,
            hold_ttl_seconds: 300,
            policy: Default::default(),
        },
        layout,
    }
}

fn seat_name(i: usize) -> String {
    if i < SEATS {
        format!("A-{}-{}", i / 6 + 1, i % 6 + 1)
    } else {
        format!("F-GA1-{}", i - SEATS + 1)
    }
}

fn is_ga(name: &str) -> bool {
    name.starts_with("F-")
}

struct World {
    show_id: ShowId,
    show: Show,
    log: Vec<ShowEvent>,
    now: DateTime<Utc>,
    holds: Vec<HoldId>,
    orders: Vec<OrderId>,
    last_keyed: Option<ShowCommand>,
    seen_hold_states: HashMap<HoldId, HoldStatus>,
    seen_order_states: HashMap<OrderId, OrderStatus>,
    keys: u64,
}

fn replay(log: &[ShowEvent]) -> Show {
    let mut show = Show::default();
    for e in log {
        cqrs_es::Aggregate::apply(&mut show, e.clone());
    }
    show
}

impl World {
    fn new() -> Self {
        let show_id = ShowId::random();
        let mut w = World {
            show_id,
            show: Show::default(),
            log: Vec::new(),
            now: t0(),
            holds: Vec::new(),
            orders: Vec::new(),
            last_keyed: None,
            seen_hold_states: HashMap::new(),
            seen_order_states: HashMap::new(),
            keys: 0,
        };
        w.run(schedule(show_id)).expect("schedules");
        w
    }

    fn run(&mut self, cmd: ShowCommand) -> Result<Vec<ShowEvent>> {
        let events = self.show.decide(cmd, self.now)?;
        for e in &events {
            if let ShowEvent::OrderPlaced {
                hold_id, placed_at, ..
            } = e
            {
                let hold = self.show.hold(hold_id).expect("ordered hold exists");
                assert!(
                    hold.expires_at > *placed_at,
                    "an order was placed on an expired hold"
                );
                assert_eq!(
                    hold.state,
                    HoldStatus::Active,
                    "an order was placed on a dead hold"
                );
            }
            if let ShowEvent::HoldExpired { hold_id } = e {
                let hold = self.show.hold(hold_id).expect("expired hold exists");
                assert!(
                    hold.expires_at <= self.now,
                    "a live hold was expired early and its seats taken"
                );
            }
            cqrs_es::Aggregate::apply(&mut self.show, e.clone());
            self.log.push(e.clone());
        }
        Ok(events)
    }

    fn key(&mut self) -> Idempotency {
        self.keys += 1;
        Idempotency {
            key: IdempotencyKey::parse(&format!("k{}", self.keys)).expect("key"),
            fingerprint: format!("fp{}", self.keys),
        }
    }

    fn step(&mut self, op: Op) {
        let captured = matches!(op, Op::Pay { outcome: 0, .. });
        let acct = |who: usize| AccountId::parse(ACCOUNTS[who]).expect("account");
        match op {
            Op::Hold { who, seats, keyed } => {
                let idempotency = keyed.then(|| self.key());
                let hold_id = HoldId::new(self.show_id);
                let cmd = ShowCommand::HoldSeats {
                    hold_id,
                    account: acct(who),
                    seat_ids: seats.iter().map(|&i| seat_name(i)).collect(),
                    idempotency: idempotency.clone(),
                };
                let outcome = self.run(cmd.clone());
                // A general-admission unit is never picked: the whole request is refused.
                if seats.iter().any(|&i| i >= SEATS) {
                    assert!(
                        matches!(outcome, Err(ShowError::GeneralAdmission(_)))
                            || (keyed && outcome.is_err()),
                        "a pick of a general-admission unit: {outcome:?}"
                    );
                }
                if outcome.is_ok() {
                    self.holds.push(hold_id);
                    if idempotency.is_some() {
                        self.last_keyed = Some(cmd);
                    }
                }
            }
            Op::Best { who, quantity, ga } => {
                let hold_id = HoldId::new(self.show_id);
                let cmd = ShowCommand::HoldBestAvailable {
                    hold_id,
                    account: acct(who),
                    quantity,
                    section: ga.then(|| "F".to_owned()),
                    idempotency: None,
                };
                // Seats (or units of the floor) a new hold could take now: free, or held by a
                // hold that has lapsed.
                let takeable = self
                    .show
                    .seats()
                    .filter(|(name, _)| is_ga(name) == ga)
                    .filter(|(_, seat)| match seat {
                        Seat::Available => true,
                        Seat::Held(h) => {
                            self.show.hold(h).is_some_and(|h| h.expires_at <= self.now)
                        }
                        Seat::PendingPayment(_) | Seat::Sold(_) => false,
                    })
                    .count();
                match self.run(cmd) {
                    Ok(events) => {
                        self.holds.push(hold_id);
                        let seats = match events.last() {
                            Some(ShowEvent::SeatsHeld { seat_ids, .. }) => seat_ids,
                            other => panic!("best available emitted {other:?}"),
                        };
                        assert_eq!(seats.len(), quantity as usize);
                        // The floor only when asked for; the seats otherwise.
                        assert!(seats.iter().all(|s| is_ga(s.as_str()) == ga), "{seats:?}");
                    }
                    // Refusing for want of seats is only honest when there are too few.
                    Err(ShowError::SeatUnavailable { .. }) => assert!(
                        takeable < quantity as usize,
                        "best available refused {quantity} seats with {takeable} takeable"
                    ),
                    Err(_) => {}
                }
            }
            Op::Release { who, pick } => {
                if let Some(&hold_id) = pick_from(&self.holds, pick) {
                    let _ = self.run(ShowCommand::ReleaseHold {
                        hold_id,
                        account: acct(who),
                    });
                }
            }
            Op::Order { who, pick } => {
                if let Some(&hold_id) = pick_from(&self.holds, pick) {
                    let order_id = OrderId::new(self.show_id);
                    let idempotency = self.key();
                    let cmd = ShowCommand::PlaceOrder {
                        order_id,
                        hold_id,
                        account: acct(who),
                        idempotency,
                    };
                    if matches!(self.run(cmd.clone()), Ok(ref e) if !e.is_empty()) {
                        self.orders.push(order_id);
                        self.last_keyed = Some(cmd);
                    }
                }
            }
            Op::Pay { pick, outcome } => {
                if let Some(&order_id) = pick_from(&self.orders, pick) {
                    let cmd = match outcome {
                        0 => ShowCommand::RecordPaymentSucceeded {
                            order_id,
                            amount_cents: None,
                        },
                        1 => ShowCommand::RecordPaymentFailed {
                            code: PaymentFailure::CardDeclined,
                            order_id,
                            reason: "declined".into(),
                        },
                        _ => ShowCommand::RecordPaymentAmbiguous {
                            order_id,
                            reason: "timeout".into(),
                        },
                    };
                    let _ = self.run(cmd);
                }
            }
            Op::Compensate { pick } => {
                if let Some(&order_id) = pick_from(&self.orders, pick) {
                    let _ = self.run(ShowCommand::CompensateOrder { order_id });
                }
            }
            Op::Cancel { who, pick } => {
                if let Some(&order_id) = pick_from(&self.orders, pick) {
                    let _ = self.run(ShowCommand::CancelOrder {
                        order_id,
                        account: acct(who),
                        admin: false,
                    });
                }
            }
            Op::Refund { pick } => {
                if let Some(&order_id) = pick_from(&self.orders, pick) {
                    let _ = self.run(ShowCommand::RecordRefund {
                        order_id,
                        refund_id: format!("re_{order_id}"),
                    });
                }
            }
            Op::Sweep => {
                let hold_ids = self.show.expired_holds(self.now, 100);
                self.run(ShowCommand::ExpireHolds { hold_ids })
                    .expect("sweeps never fail");
            }
            Op::Tick { secs } => self.now += Duration::seconds(secs),
            Op::Retry => {
                if let Some(cmd) = self.last_keyed.clone() {
                    // A retry after a lost response: fresh ids, same key and body.
                    let retried = match cmd {
                        ShowCommand::HoldSeats {
                            account,
                            seat_ids,
                            idempotency,
                            ..
                        } => ShowCommand::HoldSeats {
                            hold_id: HoldId::new(self.show_id),
                            account,
                            seat_ids,
                            idempotency,
                        },
                        ShowCommand::PlaceOrder {
                            hold_id,
                            account,
                            idempotency,
                            ..
                        } => ShowCommand::PlaceOrder {
                            order_id: OrderId::new(self.show_id),
                            hold_id,
                            account,
                            idempotency,
                        },
                        other => other,
                    };
                    let events = self
                        .run(retried)
                        .expect("a retry with the same key is answered");
                    assert!(
                        events.is_empty(),
                        "a retry created something new: {events:?}"
                    );
                }
            }
            Op::Crash => self.show = replay(&self.log),
            Op::Snapshot => {
                let json = serde_json::to_value(&self.show).expect("snapshot serializes");
                // What the owner writes (the copy without the index) is the same snapshot.
                let copied = self
                    .show
                    .snapshot_copy()
                    .to_json()
                    .expect("the copy serializes");
                assert_eq!(
                    serde_json::from_str::<serde_json::Value>(&copied).expect("json"),
                    json,
                    "the owner's snapshot copy differs from the show's own"
                );
                let restored: Show = serde_json::from_value(json.clone()).expect("snapshot loads");
                let replayed = serde_json::to_value(replay(&self.log)).expect("replay serializes");
                assert_eq!(
                    json, replayed,
                    "the live aggregate differs from a replay of its log"
                );
                self.show = restored;
            }
        }
        self.check(captured);
    }

    /// `captured`: the step reported a successful charge (the only thing that may revive a
    /// failed order).
    fn check(&mut self, captured: bool) {
        // The counts best available and the sweeper read never drift from the seats.
        assert!(self.show.index_matches_rebuild(), "index drifted");
        let mut claimed: HashMap<usize, OrderId> = HashMap::new();
        for (i, (name, seat)) in self.show.seats().enumerate() {
            match seat {
                Seat::Available => {}
                Seat::Held(h) => {
                    let hold = self.show.hold(h).expect("held by a known hold");
                    assert_eq!(hold.state, HoldStatus::Active, "{name} held by a dead hold");
                    assert!(hold.seats.contains(&(i as u32)));
                }
                Seat::PendingPayment(o) | Seat::Sold(o) => {
                    let order = self.show.order(o).expect("claimed by a known order");
                    let expected: &[OrderStatus] = if matches!(seat, Seat::Sold(_)) {
                        &[OrderStatus::Confirmed]
                    } else {
                        &[OrderStatus::PendingPayment, OrderStatus::PaymentFailed]
                    };
                    assert!(
                        expected.contains(&order.state),
                        "{name} is {seat:?} but order is {:?}",
                        order.state
                    );
                    assert!(claimed.insert(i, *o).is_none());
                }
            }
        }
        // No seat belongs to two orders that still count: never sold twice.
        let mut owner: HashMap<u32, OrderId> = HashMap::new();
        for (id, order) in self.show.orders() {
            if !order.state.claims_seats() {
                continue;
            }
            for &s in &order.seats {
                if let Some(other) = owner.insert(s, *id) {
                    panic!("seat {s} claimed by orders {other} and {id}");
                }
            }
            if order.state == OrderStatus::Confirmed {
                assert!(order
                    .seats
                    .iter()
                    .all(|&s| claimed.get(&(s as usize)) == Some(id)));
            }
        }
        for (id, hold) in self.show.holds() {
            if hold.state == HoldStatus::Active {
                for &s in &hold.seats {
                    assert!(
                        matches!(self.show.seats().nth(s as usize), Some((_, Seat::Held(h))) if h == id)
                    );
                }
            }
            if let Some(prev) = self.seen_hold_states.insert(*id, hold.state) {
                assert!(
                    prev == HoldStatus::Active || prev == hold.state,
                    "hold {id} regressed from {prev:?}"
                );
            }
        }
        for (id, order) in self.show.orders() {
            if let Some(prev) = self.seen_order_states.insert(*id, order.state) {
                use OrderStatus as S;
                let now = order.state;
                let allowed = prev == now
                    || match prev {
                        S::PendingPayment => now != S::Cancelled && now != S::Refunded,
                        S::PaymentFailed | S::Failed => {
                            now == S::Failed
                                || (captured && matches!(now, S::Confirmed | S::MakeGood))
                        }
                        S::Confirmed => now == S::Cancelled,
                        S::Cancelled | S::MakeGood => now == S::Refunded,
                        S::Refunded => false,
                    };
                assert!(allowed, "order {id} went from {prev:?} to {now:?}");
            }
        }
        for who in ACCOUNTS {
            let acct = AccountId::parse(who).expect("account");
            assert!(self.show.seats_claimed_by(&acct, self.now) <= MAX_SEATS_PER_ACCOUNT);
        }
        // Never more of the floor held, pending or sold than its capacity, and the orders
        // that count never claim more of it either.
        let floor = self.show.seats().filter(|(name, _)| is_ga(name)).count();
        assert_eq!(floor, GA);
        let claimed_units: usize = self
            .show
            .orders()
            .filter(|(_, o)| o.state.claims_seats())
            .map(|(_, o)| o.seats.iter().filter(|&&s| s as usize >= SEATS).count())
            .sum();
        assert!(claimed_units <= GA, "{claimed_units} units of {GA} claimed");
    }
}

fn pick_from<T>(v: &[T], pick: usize) -> Option<&T> {
    (!v.is_empty()).then(|| &v[pick % v.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn invariants_hold_under_any_interleaving(ops in prop::collection::vec(op(), 1..120)) {
        let mut world = World::new();
        for op in ops {
            world.step(op);
        }
        // Snapshot at the end plus an empty tail equals a replay from zero.
        world.step(Op::Snapshot);
    }

    #[test]
    fn snapshot_plus_tail_equals_full_replay(ops in prop::collection::vec(op(), 1..80), cut in any::<usize>()) {
        let mut world = World::new();
        for op in ops {
            world.step(op);
        }
        let cut = cut % world.log.len();
        let snapshot = serde_json::to_string(&replay(&world.log[..cut])).expect("serializes");
        let mut show: Show = serde_json::from_str(&snapshot).expect("loads");
        for e in &world.log[cut..] {
            cqrs_es::Aggregate::apply(&mut show, e.clone());
        }
        prop_assert_eq!(
            serde_json::to_value(&show).expect("json"),
            serde_json::to_value(replay(&world.log)).expect("json")
        );
    }

    /// The owner copies the show for a snapshot and serializes the copy later, off its task,
    /// while it goes on deciding: the copy shares the show's holds, orders and keys (ADR 026),
    /// and whatever the show does meanwhile, the copy serializes to the state it was taken at.
    #[test]
    fn a_snapshot_copy_keeps_the_state_it_was_taken_at_while_the_show_moves_on(
        before in prop::collection::vec(op(), 1..80),
        after in prop::collection::vec(op(), 1..80),
    ) {
        let mut world = World::new();
        for op in before {
            world.step(op);
        }
        let at_copy = serde_json::to_value(&world.show).expect("json");
        let copy = world.show.snapshot_copy();
        for op in after {
            world.step(op);
        }
        let copied: serde_json::Value =
            serde_json::from_str(&copy.to_json().expect("the copy serializes")).expect("json");
        prop_assert_eq!(copied, at_copy);
        world.step(Op::Snapshot);
    }

    #[test]
    fn events_round_trip_through_json(ops in prop::collection::vec(op(), 1..60)) {
        let mut world = World::new();
        for op in ops {
            world.step(op);
        }
        for e in &world.log {
            let json = serde_json::to_string(e).expect("serializes");
            prop_assert_eq!(&serde_json::from_str::<ShowEvent>(&json).expect("parses"), e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Read models only look again at the seats an event names (`seats_touched_by`): every seat
    /// whose state an event changes must be among them, or the seat map would drift.
    #[test]
    fn every_changed_seat_is_touched(ops in prop::collection::vec(op(), 1..100)) {
        let mut world = World::new();
        for op in ops {
            world.step(op);
        }
        let mut show = Show::default();
        for e in &world.log {
            let before: Vec<_> = (0..show.seat_count() as u32).map(|i| show.seat_at(i).map(|(_, s)| *s)).collect();
            let touched = show.seats_touched_by(e);
            cqrs_es::Aggregate::apply(&mut show, e.clone());
            for (i, was) in before.iter().enumerate() {
                let now = show.seat_at(i as u32).map(|(_, s)| *s);
                if *was != now {
                    prop_assert!(touched.contains(&(i as u32)), "{e:?} changed seat {i} without naming it");
                }
            }
        }
    }
}
