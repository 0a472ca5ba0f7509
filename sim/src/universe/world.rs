//! What a universe's nodes share: the processor simulator, the money and the tickets, what
//! clients were told, and the payment worker's, webhooks' and reconciliation's rounds on it.

use super::*;

pub(super) struct Node {
    pub(super) shows: Shows,
    pub(super) link: Link,
    pub(super) stop: CancellationToken,
    pub(super) tasks: TaskTracker,
}

/// What the clients were told, waiting to be checked against the log.
#[derive(Default)]
pub(super) struct Acks {
    pub(super) holds: Vec<HoldId>,
    pub(super) orders: Vec<OrderId>,
    pub(super) released: Vec<HoldId>,
    pub(super) cancelled: Vec<OrderId>,
}

/// What the fans know: their acknowledged holds and orders (the ids they may act on next).
#[derive(Default)]
pub(super) struct Known {
    pub(super) holds: Vec<(HoldId, AccountId)>,
    pub(super) orders: Vec<(OrderId, AccountId)>,
}

pub(super) struct Shared {
    pub(super) trace: Mutex<Vec<String>>,
    pub(super) acks: Mutex<Acks>,
    pub(super) known: Mutex<Known>,
    pub(super) money: Arc<Mutex<Money>>,
    pub(super) tickets: Mutex<TicketBook>,
    /// The card and settle delay each order is paid with, drawn when it is placed.
    pub(super) cards: Mutex<BTreeMap<OrderId, (&'static str, chrono::Duration)>>,
    pub(super) commands: AtomicU64,
    pub(super) nodes: Vec<Shows>,
    pub(super) store: MemoryEventLog,
    pub(super) show: ShowId,
    pub(super) clock: Arc<dyn Clock>,
}

impl Shared {
    pub(super) fn note(&self, line: String) {
        let line = format!("[{}] {line}", self.clock.now().format("%H:%M:%S%.3f"));
        self.trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    pub(super) fn money(&self) -> std::sync::MutexGuard<'_, Money> {
        self.money.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn tickets(&self) -> std::sync::MutexGuard<'_, TicketBook> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the show's owner `query`, on node `first` and then the next while the answer is
    /// "try again".
    pub(super) async fn ask(
        &self,
        first: usize,
        attempts: usize,
        query: ShowQuery,
    ) -> Result<Found, CommandError> {
        let mut answer = Err(CommandError::Unavailable);
        for attempt in 0..attempts {
            let node = (first + attempt) % self.nodes.len();
            self.commands.fetch_add(1, Ordering::Relaxed);
            answer = self.nodes[node].ask(self.show, query.clone()).await;
            if !answer.as_ref().is_err_and(CommandError::is_transient) {
                break;
            }
        }
        answer
    }

    /// Sends `command` to node `first`, and while the answer is "try again" (the node does not
    /// own the show, is cut off, or lost the answer) to the next, up to `attempts` nodes: what
    /// a client behind a load balancer, or the payment worker, does.
    pub(super) async fn deliver(
        &self,
        first: usize,
        attempts: usize,
        command: &ShowCommand,
    ) -> (usize, Result<Answer, CommandError>) {
        let (mut by, mut answer) = (first, Err(CommandError::Unavailable));
        for attempt in 0..attempts {
            let node = (first + attempt) % self.nodes.len();
            self.commands.fetch_add(1, Ordering::Relaxed);
            answer = self.nodes[node].execute(self.show, command.clone()).await;
            by = node;
            if !answer.as_ref().is_err_and(CommandError::is_transient) {
                break;
            }
        }
        (by, answer)
    }

    /// One round of the payment worker on `order`'s payment: a call to the processor, then
    /// what the worker's rules say to do with the answer.
    pub(super) async fn pay(&self, first: usize, order: OrderId) {
        let now = self.clock.now();
        let called = {
            let mut money = self.money();
            money.call(order, now).map(|(state, verdict)| {
                let step = money.next(order, state, &verdict, now);
                (state, verdict, step)
            })
        };
        let Some((state, verdict, step)) = called else {
            return;
        };
        let label = format!(
            "worker {} ({state:?}) heard {verdict:?}",
            short(order.to_string())
        );
        let (next, command) = match step {
            Step::Record(outcome) => (PaymentState::Done, Some(outcome.into_command(order))),
            Step::Charge => (PaymentState::Charge, None),
            Step::Force { .. } => (
                PaymentState::Void,
                Some(
                    Outcome::Failed(
                        PaymentFailure::PaymentTimedOut,
                        "the payment did not resolve in time".into(),
                    )
                    .into_command(order),
                ),
            ),
            Step::Wait {
                state,
                why,
                ambiguous,
            } => (
                state,
                ambiguous.then_some(ShowCommand::RecordPaymentAmbiguous {
                    order_id: order,
                    reason: why,
                }),
            ),
        };
        let answer = match &command {
            Some(c) => Some(self.deliver(first, 4, c).await),
            None => None,
        };
        let mut money = self.money();
        if let Some(p) = money.payments.get_mut(&order) {
            p.busy = false;
            // The outcome's row is closed once the log has it; a forced failure moves to the
            // void first, whatever the answer, as the worker's row does.
            let keep = matches!(&answer, Some((_, a)) if !recorded(a));
            if next == PaymentState::Done && !keep {
                p.done = true;
            }
            if next != PaymentState::Done {
                p.state = next;
            }
        }
        drop(money);
        let outcome = answer.as_ref().map_or("nothing to record".to_owned(), told);
        self.note(format!("{label} -> {outcome}"));
    }

    /// One run of the settlement reconciliation for today, on node `first`'s registry: how many
    /// captures it resolved.
    pub(super) async fn reconcile(&self, first: usize) -> usize {
        let processor = SimProcessor {
            money: self.money.clone(),
            clock: self.clock.clone(),
        };
        let today = self.clock.now().date_naive();
        let files = match read_settlement(&processor, today, today).await {
            Ok(files) => files,
            Err(e) => {
                self.note(format!("reconciliation could not read the file: {e}"));
                return 0;
            }
        };
        // The job's calls reach the show's owner (a node forwards them there); the simulation
        // does not forward, so the job runs on the owner's node.
        let owner = self
            .store
            .owner(self.show)
            .and_then(|id| self.nodes.iter().position(|n| n.node().id == id));
        let node = owner.unwrap_or(first);
        let report = settle_captures(&self.nodes[node], &processor, &files).await;
        let kinds: Vec<String> = report
            .resolved
            .iter()
            .chain(&report.unresolved)
            .map(|f| format!("{} {}", f.kind, short(f.reference.clone())))
            .collect();
        self.note(format!(
            "reconciliation on node {node}: {} captures, {kinds:?}",
            report.captures
        ));
        report.resolved.len() + report.unresolved.len()
    }

    /// The job's `finish_cancellations`: `CancelOrder` again (with the admin's right) for
    /// every cancellation whose tickets were revoked and which never reached the log; done when
    /// it is in, or the order cannot be cancelled any more.
    pub(super) async fn finish_cancellations(&self, first: usize) {
        let unfinished = self.tickets().unfinished();
        for (order, by) in unfinished {
            let (Ok(order_id), Ok(account)) = (order.parse::<OrderId>(), AccountId::parse(&by))
            else {
                continue;
            };
            let command = ShowCommand::CancelOrder {
                order_id,
                account,
                admin: true,
            };
            let answer = self.deliver(first, 4, &command).await;
            if matches!(
                answer.1,
                Ok(_)
                    | Err(CommandError::Domain(
                        ShowError::NotCancellable(_) | ShowError::OrderNotFound
                    ))
            ) {
                self.tickets().recorded(&order);
            }
            self.note(format!(
                "finish the cancellation of {} -> {}",
                short(order),
                told(&answer)
            ));
        }
    }

    /// The refund owed for `order`: at the processor, then in the log.
    pub(super) async fn refund(&self, first: usize, order: OrderId) {
        let now = self.clock.now();
        let refunded = self.money().refund(order, now);
        let outcome = match refunded {
            Ok(refund_id) => {
                let answer = self
                    .deliver(
                        first,
                        4,
                        &ShowCommand::RecordRefund {
                            order_id: order,
                            refund_id,
                        },
                    )
                    .await;
                let done = recorded(&answer.1);
                let mut money = self.money();
                if let Some(r) = money.refunds.get_mut(&order) {
                    r.done = done;
                }
                told(&answer)
            }
            Err(e) => format!("processor refused: {e}"),
        };
        if let Some(r) = self.money().refunds.get_mut(&order) {
            r.busy = false;
        }
        self.note(format!("refund {} -> {outcome}", short(order.to_string())));
    }
}

/// What a client was told, and by which node, for the trace.
pub(super) fn told((node, answer): &(usize, Result<Answer, CommandError>)) -> String {
    let said = match answer {
        Ok(a) => format!("ok {}", answered(a)),
        Err(CommandError::Domain(e)) => format!("refused: {e}"),
        Err(e) => format!("{e}"),
    };
    format!("node {node}: {said}")
}

/// Whether the worker closes its row (the payment worker's own rule).
pub(super) fn recorded(answer: &Result<Answer, CommandError>) -> bool {
    onsale_payments::worker::outcome_recorded(answer)
}
