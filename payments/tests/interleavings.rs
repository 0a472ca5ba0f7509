//! Property test of the payment path's rules: random interleavings of purchases, charge calls
//! whose answers are lost (before or after the processor acted), status checks, voids at the
//! ambiguity bound, webhooks delivered twice and out of order, hold expiries, cancellations,
//! refunds, late settlement and reconciliation. The worker's decisions are `next_step` (the
//! function the worker runs), the books are the simulator's `Ledger` (the witness), the orders
//! and seats are the real show aggregate.
//!
//! Always: no order captured twice, no seat in two confirmed orders, no order confirmed without
//! a capture, a refunded order never moves. At the end, once everything owed has been done:
//! every order is resolved and its money agrees with its status.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, TimeZone, Utc};
use cqrs_es::Aggregate;
use onsale_domain::show::Seat;
use onsale_domain::*;
use onsale_payments::client::Verdict;
use onsale_payments::worker::{next_step, PaymentState, Step};
use onsale_processor_sim::{ChargeRequest, ChargeStatus, Ledger, LedgerError, WebhookEvent};
use proptest::prelude::*;

const SEATS: u32 = 6;
const BOUND_SECS: u64 = 20;
const TOKENS: [&str; 5] = [
    "tok_ok",
    "tok_decline",
    "tok_timeout_then_ok",
    "tok_timeout_then_fail",
    "tok_late_settle",
];

#[derive(Debug, Clone)]
enum Op {
    Buy {
        who: u8,
        seat: u32,
        token: usize,
    },
    /// A worker call on an open payment; `reach` 0: lost before the processor, 1: the
    /// processor acted but the answer was lost, 2: answered.
    Work {
        pick: usize,
        reach: u8,
    },
    Webhook {
        pick: usize,
        duplicate: bool,
    },
    Tick {
        secs: i64,
    },
    Sweep,
    Cancel {
        pick: usize,
    },
    Refund {
        pick: usize,
    },
    Reconcile,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4u8, 0..SEATS, 0..TOKENS.len()).prop_map(|(who, seat, token)| Op::Buy { who, seat, token }),
        5 => (any::<usize>(), 0..3u8).prop_map(|(pick, reach)| Op::Work { pick, reach }),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(pick, duplicate)| Op::Webhook { pick, duplicate }),
        2 => (0..15i64).prop_map(|secs| Op::Tick { secs }),
        1 => Just(Op::Sweep),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Refund { pick }),
        1 => Just(Op::Reconcile),
    ]
}

#[derive(Debug, Clone)]
struct Payment {
    order: OrderId,
    token: &'static str,
    amount: i64,
    state: PaymentState,
    forced: bool,
    placed_at: DateTime<Utc>,
}

struct World {
    show_id: ShowId,
    show: Show,
    ledger: Ledger,
    now: DateTime<Utc>,
    payments: Vec<Payment>,
    webhooks: Vec<WebhookEvent>,
    refunded_seen: HashMap<OrderId, ()>,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0)
        .single()
        .expect("time")
}

impl World {
    fn new() -> Self {
        let show_id = ShowId::random();
        let layout: VenueLayout = serde_json::from_value(serde_json::json!([
            {"section": "A", "priceTier": "A", "rows": [{"row": "1", "seats": SEATS}]}
        ]))
        .expect("layout");
        let info = ShowInfo {
            show_id,
            venue_id: VenueId::random(),
            venue_name: "Hall".into(),
            city: "Oslo".into(),
            name: "Night".into(),
            performer: "Band".into(),
            starts_at: t0() + Duration::days(30),
            on_sale_at: t0() - Duration::hours(1),
            prices: [("A".to_owned(), 5_000)].into_iter().collect(),
            currency: Default::default(),
            waiting_room: false,
            hold_ttl_seconds: 30,
            policy: Default::default(),
        };
        let mut w = Self {
            show_id,
            show: Show::default(),
            ledger: Ledger::default(),
            now: t0(),
            payments: Vec::new(),
            webhooks: Vec::new(),
            refunded_seen: HashMap::new(),
        };
        w.run(ShowCommand::Schedule { info, layout })
            .expect("schedule");
        w
    }

    fn run(&mut self, cmd: ShowCommand) -> Result<Vec<ShowEvent>> {
        let events = self.show.decide(cmd, self.now)?;
        for e in &events {
            self.show.apply(e.clone());
            self.intake(e);
        }
        Ok(events)
    }

    /// The intake's rule: an outcome in the log closes the payment (a failure only when it was
    /// not forced at the bound, which still owes the void).
    fn intake(&mut self, e: &ShowEvent) {
        let Some(order) = e.order_id() else { return };
        let captured = matches!(
            e,
            ShowEvent::PaymentSucceeded { .. }
                | ShowEvent::OrderReinstated { .. }
                | ShowEvent::MakeGoodOwed { .. }
        );
        let failed = matches!(e, ShowEvent::PaymentFailed { .. });
        if let Some(p) = self.payments.iter_mut().find(|p| p.order == order) {
            if captured || (failed && !p.forced) {
                p.state = PaymentState::Done;
            }
        }
    }

    fn record(&mut self, cmd: ShowCommand) {
        match self.run(cmd) {
            Ok(_) | Err(ShowError::InvalidTransition { .. }) => {}
            Err(e) => panic!("recording an outcome failed: {e}"),
        }
    }

    fn settle(&mut self) {
        self.ledger.advance(self.now);
        self.webhooks.extend(self.ledger.take_events());
    }

    fn verdict_of(status: Option<ChargeStatus>) -> Verdict {
        match status {
            None => Verdict::NoCharge,
            Some(ChargeStatus::Succeeded | ChargeStatus::Refunded) => Verdict::Captured {
                charge_id: "ch".into(),
            },
            Some(ChargeStatus::Failed) => Verdict::Declined {
                reason: "declined".into(),
            },
            Some(ChargeStatus::Voided) => Verdict::Voided,
            Some(ChargeStatus::Pending) => Verdict::Unknown {
                why: "pending".into(),
            },
        }
    }

    /// One worker call on payment `i`, as the worker does it.
    fn work(&mut self, i: usize, reach: u8) {
        let p = self.payments[i].clone();
        let key = p.order.to_string();
        let lost = Verdict::Unknown {
            why: "timeout".into(),
        };
        let verdict = match p.state {
            PaymentState::Charge => {
                if reach > 0 {
                    let req = ChargeRequest {
                        amount_cents: p.amount,
                        token: p.token.into(),
                        reference: key.clone(),
                    };
                    let c = self
                        .ledger
                        .charge(&key, req, Duration::seconds(5), self.now)
                        .expect("the same key and body are always accepted");
                    self.webhooks.extend(self.ledger.take_events());
                    if reach == 2 && !c.behaviour.hangs() {
                        Self::verdict_of(Some(c.status))
                    } else {
                        lost
                    }
                } else {
                    lost
                }
            }
            PaymentState::Unknown if reach == 2 => {
                Self::verdict_of(self.ledger.status(&key).map(|c| c.status))
            }
            PaymentState::Void if reach == 2 => match self.ledger.void(&key, self.now) {
                Ok(c) => Self::verdict_of(Some(c.status)),
                Err(LedgerError::NoSuchCharge) => Verdict::NoCharge,
                Err(LedgerError::AlreadyCaptured) => {
                    Self::verdict_of(Some(ChargeStatus::Succeeded))
                }
                Err(e) => panic!("void: {e}"),
            },
            _ => lost,
        };
        self.webhooks.extend(self.ledger.take_events());
        let pending = (self.now - p.placed_at).num_seconds();
        match next_step(p.state, &verdict, pending, BOUND_SECS) {
            Step::Record(outcome) => {
                self.record(outcome.into_command(p.order));
                self.payments[i].state = PaymentState::Done;
            }
            Step::Charge => self.payments[i].state = PaymentState::Charge,
            Step::Wait { state, .. } => self.payments[i].state = state,
            Step::Force { .. } => {
                self.payments[i].state = PaymentState::Void;
                self.payments[i].forced = true;
                self.record(ShowCommand::RecordPaymentFailed {
                    code: PaymentFailure::CardDeclined,
                    order_id: p.order,
                    reason: "unresolved".into(),
                });
            }
        }
    }

    fn deliver(&mut self, i: usize, duplicate: bool) {
        let e = if duplicate {
            self.webhooks[i].clone()
        } else {
            self.webhooks.remove(i)
        };
        let Ok(order_id) = e.reference.parse::<OrderId>() else {
            return;
        };
        match e.kind.as_str() {
            "charge.succeeded" => self.record(ShowCommand::RecordPaymentSucceeded {
                order_id,
                amount_cents: None,
            }),
            "charge.failed" => self.record(ShowCommand::RecordPaymentFailed {
                code: PaymentFailure::CardDeclined,
                order_id,
                reason: "webhook".into(),
            }),
            _ => {}
        }
    }

    fn reconcile(&mut self) {
        let captured: Vec<OrderId> = self
            .ledger
            .charges()
            .filter(|c| c.captured_at.is_some())
            .filter_map(|c| c.reference.parse().ok())
            .collect();
        for order_id in captured {
            let state = self.show.order(&order_id).map(|o| o.state);
            if matches!(
                state,
                Some(
                    OrderStatus::PendingPayment | OrderStatus::PaymentFailed | OrderStatus::Failed
                )
            ) {
                self.record(ShowCommand::RecordPaymentSucceeded {
                    order_id,
                    amount_cents: None,
                });
            }
        }
    }

    fn refund(&mut self, order_id: OrderId) {
        let Some(o) = self.show.order(&order_id) else {
            return;
        };
        if !matches!(o.state, OrderStatus::Cancelled | OrderStatus::MakeGood) {
            return;
        }
        let key = format!("refund-{order_id}");
        let r = self
            .ledger
            .refund(&key, &order_id.to_string(), o.total_cents, self.now)
            .expect("a cancelled or made-good order was captured");
        self.webhooks.extend(self.ledger.take_events());
        self.record(ShowCommand::RecordRefund {
            order_id,
            refund_id: r.refund_id,
        });
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Buy { who, seat, token } => {
                let account = AccountId::parse(&format!("fan{who}")).expect("account");
                let hold_id = HoldId::new(self.show_id);
                let held = self.run(ShowCommand::HoldSeats {
                    hold_id,
                    account: account.clone(),
                    seat_ids: vec![format!("A-1-{}", seat + 1)],
                    idempotency: None,
                });
                if held.is_ok() {
                    let order = OrderId::new(self.show_id);
                    let placed = self.run(ShowCommand::PlaceOrder {
                        order_id: order,
                        hold_id,
                        account,
                        idempotency: Idempotency {
                            key: IdempotencyKey::parse(&format!("k-{order}")).expect("key"),
                            fingerprint: "fp".into(),
                        },
                    });
                    if placed.is_ok() {
                        self.payments.push(Payment {
                            order,
                            token: TOKENS[token],
                            amount: self.show.order(&order).expect("order").total_cents,
                            state: PaymentState::Charge,
                            forced: false,
                            placed_at: self.now,
                        });
                    }
                }
            }
            Op::Work { pick, reach } => {
                let open: Vec<usize> = (0..self.payments.len())
                    .filter(|&i| self.payments[i].state != PaymentState::Done)
                    .collect();
                if !open.is_empty() {
                    self.work(open[pick % open.len()], reach);
                }
            }
            Op::Webhook { pick, duplicate } => {
                if !self.webhooks.is_empty() {
                    let i = pick % self.webhooks.len();
                    self.deliver(i, duplicate);
                }
            }
            Op::Tick { secs } => {
                self.now += Duration::seconds(secs);
                self.settle();
            }
            Op::Sweep => {
                let hold_ids = self.show.expired_holds(self.now, 100);
                self.run(ShowCommand::ExpireHolds { hold_ids })
                    .expect("sweep");
            }
            Op::Cancel { pick } => {
                if !self.payments.is_empty() {
                    let p = &self.payments[pick % self.payments.len()];
                    let account = self.show.order(&p.order).expect("order").account.clone();
                    let _ = self.run(ShowCommand::CancelOrder {
                        order_id: p.order,
                        account,
                        admin: false,
                    });
                }
            }
            Op::Refund { pick } => {
                if !self.payments.is_empty() {
                    let order = self.payments[pick % self.payments.len()].order;
                    self.refund(order);
                }
            }
            Op::Reconcile => self.reconcile(),
        }
        self.check();
    }

    fn check(&mut self) {
        for (reference, n) in self.ledger.captures_per_reference() {
            assert!(n <= 1, "order {reference} captured {n} times");
        }
        let captured: BTreeMap<String, i64> = self
            .ledger
            .charges()
            .filter(|c| c.captured_at.is_some())
            .map(|c| (c.reference.clone(), c.refunded_cents))
            .collect();
        let mut confirmed_seat: HashMap<u32, OrderId> = HashMap::new();
        for (id, o) in self.show.orders() {
            if o.state == OrderStatus::Confirmed {
                assert!(
                    captured.contains_key(&id.to_string()),
                    "{id} confirmed without a capture"
                );
                for &s in &o.seats {
                    if let Some(other) = confirmed_seat.insert(s, *id) {
                        panic!("seat {s} in confirmed orders {other} and {id}");
                    }
                    assert!(matches!(self.show.seat_at(s), Some((_, Seat::Sold(x))) if x == id));
                }
            }
            if o.state == OrderStatus::Refunded {
                self.refunded_seen.insert(*id, ());
            } else {
                assert!(!self.refunded_seen.contains_key(id), "{id} left REFUNDED");
            }
        }
    }

    /// Does everything still owed: the processor settles, every webhook arrives, the worker
    /// works every open payment with answers getting through, reconciliation runs and refunds
    /// go out. Then every order is resolved and its money matches it.
    fn drain(&mut self) {
        for _ in 0..8 {
            self.now += Duration::seconds(BOUND_SECS as i64 + 10);
            self.settle();
            while !self.webhooks.is_empty() {
                self.deliver(0, false);
            }
            for _ in 0..6 {
                for i in 0..self.payments.len() {
                    if self.payments[i].state != PaymentState::Done {
                        self.work(i, 2);
                    }
                }
            }
            self.reconcile();
            let orders: Vec<OrderId> = self.payments.iter().map(|p| p.order).collect();
            for o in orders {
                self.refund(o);
            }
            self.check();
        }
        let captured: BTreeMap<String, (i64, i64)> = self
            .ledger
            .charges()
            .filter(|c| c.captured_at.is_some())
            .map(|c| (c.reference.clone(), (c.amount_cents, c.refunded_cents)))
            .collect();
        for p in &self.payments {
            assert_eq!(
                p.state,
                PaymentState::Done,
                "payment of {} still open",
                p.order
            );
            let o = self.show.order(&p.order).expect("order");
            assert!(o.state.is_resolved(), "{} ended {:?}", p.order, o.state);
            let money = captured.get(&p.order.to_string()).copied();
            match o.state {
                OrderStatus::Confirmed => {
                    assert_eq!(money.map(|m| m.1), Some(0), "{} paid", p.order)
                }
                OrderStatus::Refunded => {
                    assert!(
                        matches!(money, Some((a, r)) if a == r),
                        "{} refunded in full",
                        p.order
                    )
                }
                _ => assert_eq!(money, None, "{} failed but was captured", p.order),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn payments_never_charge_twice_and_every_order_resolves(ops in prop::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for op in ops {
            w.step(op);
        }
        w.drain();
    }
}
