//! The payment worker: charges after the commit, records each definitive outcome as a command
//! on the show, and never guesses.
//!
//! Work comes from `payments` and `refunds` (filled from the log by [`crate::intake`]). A row is
//! claimed with a lease, so a worker that dies mid-call leaves it to be claimed again: the
//! charge is retried with the same key (the order id) and the processor answers with the
//! original charge, never a second one. A timeout is unknown, not failed: the order stays
//! PENDING_PAYMENT while the worker asks the status endpoint with backoff, up to the ambiguity
//! bound; past it the order is failed (its seats go back) and the charge voided, and a capture
//! that beat the void goes through the late-capture policy (ADR 006).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use onsale_command::CommandError;
use onsale_command::Shows;
use onsale_domain::{OrderId, PaymentFailure, ShowCommand, ShowError};
use onsale_eventlog::ShardId;
use onsale_processor_api::{ChargeRequest, WebhookEvent};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use onsale_payments_store::work::{self, PaymentRow, RefundRow};

use crate::client::{Processor, Verdict};
use crate::PaymentsConfig;

pub use onsale_payments_store::work::PaymentState;

/// What recording an outcome on the show came to.
enum Recorded {
    /// In the log (or it was already: a duplicate or a state the table keeps).
    Done,
    /// The event store could not take it now; try again.
    Later(String),
}

/// One shard's worker: the payments and refunds of the shows on that shard (docs/adr/021).
#[derive(Debug, Clone)]
pub struct Worker {
    pool: PgPool,
    shard: ShardId,
    shows: Shows,
    client: Arc<dyn Processor>,
    config: PaymentsConfig,
}

impl Worker {
    /// The worker of `shard`, whose database `pool` is.
    pub fn new(
        pool: PgPool,
        shard: ShardId,
        shows: Shows,
        config: PaymentsConfig,
        client: Arc<dyn Processor>,
    ) -> Self {
        Self {
            pool,
            shard,
            shows,
            client,
            config,
        }
    }

    /// Works until aborted; a failed round (database away) is logged and retried. Up to
    /// `batch` payments and refunds are in flight at once, each in its own task, so a charge
    /// that hangs until its timeout does not hold up the others.
    ///
    /// When `shutdown` is cancelled it claims nothing more and returns once the calls in
    /// flight have finished and recorded their outcomes (what it never claimed stays due for
    /// the next worker; a call cut short by a kill is retried under its lease with the same key).
    pub async fn run(self, shutdown: CancellationToken) {
        let batch = self.config.batch.max(1);
        let slots = Arc::new(Semaphore::new(batch));
        let mut tick = tokio::time::interval(Duration::from_millis(self.config.poll_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while shutdown.run_until_cancelled(tick.tick()).await.is_some() {
            if let Err(e) = self.round(&slots).await {
                metrics::counter!(onsale_telemetry::metrics::PAYMENT_WORKER_ERRORS_TOTAL)
                    .increment(1);
                tracing::warn!(error = %format!("{e:#}"), "payment round failed");
            }
        }
        // Every slot back means every call in flight has finished.
        let _ = slots
            .acquire_many(u32::try_from(batch).unwrap_or(u32::MAX))
            .await;
    }

    /// One pass: claim as much due work as there are free slots and start it.
    async fn round(&self, slots: &Arc<Semaphore>) -> anyhow::Result<()> {
        self.export_gauges().await?;
        let free = slots.available_permits();
        if free == 0 {
            return Ok(());
        }
        // The shows moving off this shard, read once for both work lists.
        let moved = onsale_eventlog::moving::moved_off(&self.pool).await?;
        let lease = self.lease();
        let payments = work::claim_payments(&self.pool, lease, free, &moved).await?;
        let free = free.saturating_sub(payments.len());
        let refunds = work::claim_refunds(&self.pool, lease, free, &moved).await?;
        for p in payments {
            let (me, permit) = (self.clone(), slots.clone().acquire_owned().await?);
            tokio::spawn(async move {
                if let Err(e) = me.pay(p).await {
                    tracing::warn!(error = %format!("{e:#}"), "payment step failed; its lease will expire");
                }
                drop(permit);
            });
        }
        for r in refunds {
            let (me, permit) = (self.clone(), slots.clone().acquire_owned().await?);
            tokio::spawn(async move {
                if let Err(e) = me.refund(r).await {
                    tracing::warn!(error = %format!("{e:#}"), "refund step failed; its lease will expire");
                }
                drop(permit);
            });
        }
        Ok(())
    }

    /// How long a claim keeps its rows from other workers: three calls at their timeout and
    /// then some, so a worker that dies mid-call leaves them to be claimed again soon after.
    fn lease(&self) -> Duration {
        Duration::from_secs((self.config.charge_timeout_ms / 1000 + 1) * 3 + 5)
    }

    async fn pay(&self, p: PaymentRow) -> anyhow::Result<()> {
        let order: OrderId = p.order_id.parse()?;
        let verdict = match p.state {
            PaymentState::Charge => {
                let request = ChargeRequest {
                    amount_cents: p.amount_cents,
                    token: p.token.clone().unwrap_or_default(),
                    reference: p.order_id.clone(),
                };
                metrics::counter!(onsale_telemetry::metrics::PAYMENT_CHARGE_CALLS_TOTAL)
                    .increment(1);
                self.client
                    .charge(&charge_key(&p.order_id, p.attempts), &request)
                    .await
            }
            PaymentState::Unknown => self.client.status(&p.order_id).await,
            PaymentState::Void => self.client.void(&p.order_id).await,
            PaymentState::Done => return Ok(()),
        };
        let pending_secs = (Utc::now() - p.placed_at).num_seconds();
        let recorded = match next_step(
            p.state,
            &verdict,
            pending_secs,
            self.config.max_pending_secs,
        ) {
            Step::Record(command) => self.record(order, command.into_command(order)).await,
            Step::Charge => {
                // The first attempt never reached the processor: charge (same key) now.
                return self
                    .reschedule(
                        &p.order_id,
                        PaymentState::Charge,
                        Duration::ZERO,
                        "no charge yet",
                    )
                    .await;
            }
            Step::Force { why } => return self.force_failure(order, &p.order_id, &why).await,
            Step::Wait {
                state,
                why,
                ambiguous,
            } => {
                if ambiguous {
                    self.record(
                        order,
                        ShowCommand::RecordPaymentAmbiguous {
                            order_id: order,
                            reason: why.clone(),
                        },
                    )
                    .await;
                }
                metrics::counter!(onsale_telemetry::metrics::PAYMENT_UNKNOWN_TOTAL).increment(1);
                return self
                    .reschedule(&p.order_id, state, backoff(p.attempts), &why)
                    .await;
            }
        };
        match recorded {
            Recorded::Done => self.close(&p.order_id).await,
            Recorded::Later(why) => {
                // The outcome is known but not in the log yet: keep the row where it is (the
                // processor answers the same way next time).
                self.reschedule(&p.order_id, p.state, backoff(p.attempts), &why)
                    .await
            }
        }
    }

    /// The ambiguity bound passed: the order fails (seats back on sale) and the void is owed.
    /// The row moves first, so a crash in between still ends in a void.
    async fn force_failure(&self, order: OrderId, id: &str, why: &str) -> anyhow::Result<()> {
        work::force_void(&self.pool, id, why).await?;
        metrics::counter!(onsale_telemetry::metrics::PAYMENT_FORCED_RESOLUTIONS_TOTAL).increment(1);
        tracing::warn!(order = %id, why, "payment unresolved past the bound: failing the order, voiding the charge");
        self.record(
            order,
            ShowCommand::RecordPaymentFailed {
                order_id: order,
                code: PaymentFailure::PaymentTimedOut,
                reason: format!(
                    "the payment did not resolve within {} s",
                    self.config.max_pending_secs
                ),
            },
        )
        .await;
        Ok(())
    }

    async fn refund(&self, r: RefundRow) -> anyhow::Result<()> {
        let order: OrderId = r.order_id.parse()?;
        let key = format!("refund-{}", r.order_id);
        match self.client.refund(&key, &r.order_id, r.amount_cents).await {
            Ok(refund) => {
                let recorded = self
                    .record(
                        order,
                        ShowCommand::RecordRefund {
                            order_id: order,
                            refund_id: refund.refund_id.clone(),
                        },
                    )
                    .await;
                match recorded {
                    Recorded::Done => {
                        work::close_refund(&self.pool, &r.order_id, &refund.refund_id).await?;
                        metrics::counter!(onsale_telemetry::metrics::REFUNDS_TOTAL).increment(1);
                    }
                    Recorded::Later(why) => self.refund_later(&r, &why).await?,
                }
            }
            Err(e) => self.refund_later(&r, &format!("{e:#}")).await?,
        }
        Ok(())
    }

    async fn refund_later(&self, r: &RefundRow, why: &str) -> anyhow::Result<()> {
        Ok(work::reschedule_refund(&self.pool, &r.order_id, backoff(r.attempts), why).await?)
    }

    /// Runs an outcome on the show. A refusal by the state table means the order already moved
    /// (a webhook or reconciliation recorded it, or a terminal state keeps it): that is done,
    /// and counted, never forced.
    async fn record(&self, order: OrderId, command: ShowCommand) -> Recorded {
        let answer = self.shows.execute(order.show(), command).await;
        if let Err(CommandError::Domain(ShowError::InvalidTransition { from, by, .. })) = &answer {
            metrics::counter!(onsale_telemetry::metrics::PAYMENT_OUTCOMES_REFUSED_TOTAL)
                .increment(1);
            tracing::info!(order = %order, %from, %by, "outcome refused by the state table; the order already moved");
        }
        if outcome_recorded(&answer) {
            Recorded::Done
        } else {
            Recorded::Later(answer.err().map(|e| e.to_string()).unwrap_or_default())
        }
    }

    async fn close(&self, id: &str) -> anyhow::Result<()> {
        Ok(work::close_payment(&self.pool, id).await?)
    }

    async fn reschedule(
        &self,
        id: &str,
        state: PaymentState,
        after: Duration,
        why: &str,
    ) -> anyhow::Result<()> {
        Ok(work::reschedule_payment(&self.pool, id, state, after, why).await?)
    }

    /// The payment SLO's gauges: the oldest unresolved payment and refund.
    async fn export_gauges(&self) -> anyhow::Result<()> {
        let (payment, refund) = work::oldest_open(&self.pool).await?;
        let shard = self.shard.to_string();
        metrics::gauge!(onsale_telemetry::metrics::PAYMENT_OLDEST_PENDING_SECONDS, "shard" => shard.clone())
            .set(payment.unwrap_or(0.0));
        metrics::gauge!(onsale_telemetry::metrics::REFUND_OLDEST_PENDING_SECONDS, "shard" => shard)
            .set(refund.unwrap_or(0.0));
        Ok(())
    }
}

/// An outcome to record on the show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed(PaymentFailure, String),
}

impl Outcome {
    pub fn into_command(self, order_id: OrderId) -> ShowCommand {
        match self {
            Self::Succeeded => ShowCommand::RecordPaymentSucceeded {
                order_id,
                amount_cents: None,
            },
            Self::Failed(code, reason) => ShowCommand::RecordPaymentFailed {
                order_id,
                code,
                reason,
            },
        }
    }
}

/// The idempotency key of an order's charge: the order id, whatever the attempt, so a retry
/// (after a timeout, a crash, a lost lease) finds the first charge and never makes a second.
pub fn charge_key(order_id: &str, attempts: i32) -> String {
    #[cfg(feature = "planted-bugs")]
    if onsale_domain::plant::planted(onsale_domain::plant::Bug::NewKeyOnRetry) {
        return format!("{order_id}-{attempts}");
    }
    let _ = attempts;
    order_id.to_owned()
}

/// The command a processor's webhook event asks for: a capture or a decline of the order it
/// names; `None` for any other event (pending, voided, refunded) or a reference that is not an
/// order.
pub fn webhook_command(event: &WebhookEvent) -> Option<(OrderId, ShowCommand)> {
    let order_id = event.reference.parse::<OrderId>().ok()?;
    let command = match event.kind.as_str() {
        "charge.succeeded" => ShowCommand::RecordPaymentSucceeded {
            order_id,
            amount_cents: Some(event.amount_cents),
        },
        "charge.failed" => ShowCommand::RecordPaymentFailed {
            order_id,
            code: PaymentFailure::CardDeclined,
            reason: "declined (processor webhook)".into(),
        },
        _ => return None,
    };
    Some((order_id, command))
}

/// Whether recording an outcome on the show is over: it is in the log, or the state table
/// refused it because the order already moved (a duplicate, a late message). Anything else
/// (the store away, the show's owner moving) is tried again.
pub fn outcome_recorded<T>(answer: &Result<T, CommandError>) -> bool {
    matches!(
        answer,
        Ok(_) | Err(CommandError::Domain(ShowError::InvalidTransition { .. }))
    )
}

/// What the worker does next with a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A definitive answer: record it.
    Record(Outcome),
    /// The processor never saw the charge: send it (same key).
    Charge,
    /// Not known: ask again later, in `state` (`unknown`: the status endpoint; `void`: the
    /// void). `ambiguous`: say so in the log (the first timeout of a charge).
    Wait {
        state: PaymentState,
        why: String,
        ambiguous: bool,
    },
    /// The ambiguity bound passed: fail the order and owe the void.
    Force { why: String },
}

/// The worker's rules, as a pure function of the row's state, the processor's verdict and
/// how long the order has waited: only a definitive answer is recorded, an unknown one is
/// asked again until the bound, and after the bound only the void is left to do.
pub fn next_step(
    state: PaymentState,
    verdict: &Verdict,
    pending_secs: i64,
    bound_secs: u64,
) -> Step {
    match (verdict, state) {
        (Verdict::Captured { .. }, _) => Step::Record(Outcome::Succeeded),
        (Verdict::Declined { reason }, _) => Step::Record(Outcome::Failed(
            PaymentFailure::CardDeclined,
            reason.clone(),
        )),
        (Verdict::Voided, _) | (Verdict::NoCharge, PaymentState::Void) => {
            Step::Record(Outcome::Failed(
                PaymentFailure::PaymentTimedOut,
                "the payment did not resolve in time; the charge was voided".into(),
            ))
        }
        (Verdict::NoCharge, _) => Step::Charge,
        (Verdict::Unknown { why }, PaymentState::Void) => Step::Wait {
            state: PaymentState::Void,
            why: why.clone(),
            ambiguous: false,
        },
        (Verdict::Unknown { why }, state) => {
            if pending_secs >= bound_secs as i64 {
                Step::Force { why: why.clone() }
            } else {
                Step::Wait {
                    state: PaymentState::Unknown,
                    why: why.clone(),
                    ambiguous: state == PaymentState::Charge,
                }
            }
        }
    }
}

/// 0.2 s doubling to 10 s, plus up to as much again of jitter: payments that failed together
/// (a processor outage) are not all retried in the same instant.
fn backoff(attempts: i32) -> Duration {
    use backon::BackoffBuilder;
    const MAX: Duration = Duration::from_secs(10);
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(MAX)
        .with_jitter()
        .without_max_times()
        .build()
        .nth(usize::try_from(attempts.clamp(0, 6)).unwrap_or(0))
        .unwrap_or(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_to_ten_seconds_with_jitter() {
        for attempts in 0..10 {
            let base = Duration::from_millis((200u64 << attempts.min(6)).min(10_000));
            let d = backoff(attempts);
            assert!(d >= base && d < base * 2, "attempt {attempts}: {d:?}");
        }
    }
}
