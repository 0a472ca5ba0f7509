//! Settlement reconciliation: the processor's settlement file against the orders, in both
//! directions. A capture for an order we failed goes through the late-capture policy (reinstate
//! or refund and make-good), one for an order still pending resolves it, one for no order at
//! all is refunded; an order we confirmed (or refunded) with no matching line is reported for a
//! human, as is everything else that could not be resolved.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Duration, NaiveDate, Utc};
use onsale_command::CommandError;
use onsale_command::Shows;
use onsale_domain::{OrderId, OrderStatus, ShowCommand, ShowError};
use serde::Serialize;
use sqlx::PgPool;

use onsale_payments_store::audits;

use crate::client::Processor;
use onsale_processor_api::SettlementLine;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `late_capture_reinstated`, `late_capture_make_good`, `pending_resolved`,
    /// `charge_without_order_refunded`, `order_without_charge`, `refund_without_settlement`,
    /// `unresolved`.
    pub kind: String,
    pub reference: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub day: Option<NaiveDate>,
    pub captures: usize,
    pub refunds: usize,
    pub matched: usize,
    pub resolved: Vec<Finding>,
    pub unresolved: Vec<Finding>,
}

fn finding(kind: &str, reference: &str, detail: impl Into<String>) -> Finding {
    Finding {
        kind: kind.to_owned(),
        reference: reference.to_owned(),
        detail: detail.into(),
    }
}

async fn order_state(shows: &Shows, order: OrderId) -> Result<Option<OrderStatus>, String> {
    let state = shows
        .ask(order.show(), onsale_command::ShowQuery::OrderState(order))
        .await;
    match state {
        Ok(onsale_command::Found::OrderState(s)) => Ok(s),
        Ok(other) => Err(format!("order state answered {other:?}")),
        Err(CommandError::Domain(ShowError::ShowNotFound)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// A day's settlement file and its neighbours' (a charge that settled across midnight is not a
/// mismatch).
#[derive(Debug, Clone, Default)]
pub struct Settlement {
    pub day: NaiveDate,
    pub lines: Vec<SettlementLine>,
    pub nearby: Vec<SettlementLine>,
}

/// Reads `day`'s settlement file and those of the days around it that exist by `today`.
pub async fn read_settlement(
    client: &dyn Processor,
    day: NaiveDate,
    today: NaiveDate,
) -> anyhow::Result<Settlement> {
    let lines = client.settlement(day).await?;
    let mut nearby = Vec::new();
    for d in [day - Duration::days(1), day + Duration::days(1)] {
        if d <= today {
            nearby.extend(client.settlement(d).await?);
        }
    }
    Ok(Settlement { day, lines, nearby })
}

/// Direction one of [`reconcile`]: every capture in the file has an order that kept the money.
/// A capture for an order still pending resolves it; one for an order that failed goes through
/// the late-capture policy (reinstated, or refunded and a make-good owed); one for no order at
/// all is refunded unless a refund already covers it.
pub async fn settle_captures(shows: &Shows, client: &dyn Processor, files: &Settlement) -> Report {
    let mut report = Report {
        day: Some(files.day),
        ..Report::default()
    };
    let refunded_cents: BTreeMap<&str, i64> = files
        .lines
        .iter()
        .chain(&files.nearby)
        .filter(|l| l.kind == "refund")
        .fold(BTreeMap::new(), |mut m, l| {
            *m.entry(l.reference.as_str()).or_insert(0) += l.amount_cents;
            m
        });
    for line in files.lines.iter().filter(|l| l.kind == "capture") {
        report.captures += 1;
        let order = line.reference.parse::<OrderId>().ok();
        let state = match order {
            Some(o) => order_state(shows, o).await,
            None => Ok(None),
        };
        let reference = line.reference.as_str();
        match (order, state) {
            (_, Err(e)) => report
                .unresolved
                .push(finding("unresolved", reference, format!("could not read the order: {e}"))),
            (Some(o), Ok(Some(OrderStatus::PendingPayment))) => {
                match record_capture(shows, o, line.amount_cents).await {
                    Ok(_) => report.resolved.push(finding("pending_resolved", reference, "capture recorded")),
                    Err(e) => report.unresolved.push(finding("unresolved", reference, e)),
                }
            }
            (Some(o), Ok(Some(OrderStatus::PaymentFailed | OrderStatus::Failed))) => {
                match record_capture(shows, o, line.amount_cents).await {
                    Ok(Some(OrderStatus::Confirmed)) => report.resolved.push(finding(
                        "late_capture_reinstated",
                        reference,
                        "captured after it failed; its seats were free, so it is confirmed",
                    )),
                    Ok(_) => report.resolved.push(finding(
                        "late_capture_make_good",
                        reference,
                        "captured after it failed and its seats were resold: refund issued, make-good owed",
                    )),
                    Err(e) => report.unresolved.push(finding("unresolved", reference, e)),
                }
            }
            (_, Ok(Some(_))) => report.matched += 1,
            (_, Ok(None)) => {
                if refunded_cents.get(reference).copied().unwrap_or(0) >= line.amount_cents {
                    report.matched += 1;
                    continue;
                }
                let key = format!("refund-orphan-{}", line.charge_key);
                match client.refund(&key, &line.charge_key, line.amount_cents).await {
                    Ok(r) => report.resolved.push(finding(
                        "charge_without_order_refunded",
                        reference,
                        format!("no such order; refunded as {}", r.refund_id),
                    )),
                    Err(e) => report.unresolved.push(finding(
                        "charge_without_order",
                        reference,
                        format!("no such order; refund failed: {e:#}"),
                    )),
                }
            }
        }
    }
    report
}

/// Reconciles `day`'s settlement file against the orders, in both directions, and stores the
/// report.
///
/// The report and the orders' states are the main database's (`pool`); the payments and
/// refunds are each shard's (`shards`): a shard that does not answer fails the run, which the
/// next one repeats whole.
pub async fn reconcile(
    pool: &PgPool,
    shards: &onsale_payments_store::Shards,
    shows: &Shows,
    client: &dyn Processor,
    day: NaiveDate,
) -> anyhow::Result<Report> {
    let files = read_settlement(client, day, Utc::now().date_naive()).await?;
    let mut report = settle_captures(shows, client, &files).await;
    let lines = &files.lines;
    let captured: BTreeSet<&str> = lines
        .iter()
        .chain(&files.nearby)
        .filter(|l| l.kind == "capture")
        .map(|l| l.reference.as_str())
        .collect();
    let refunded: BTreeSet<&str> = lines
        .iter()
        .chain(&files.nearby)
        .filter(|l| l.kind == "refund")
        .map(|l| l.reference.as_str())
        .collect();
    report.refunds = lines.iter().filter(|l| l.kind == "refund").count();
    // Direction two: every order whose payment we settled that day has its money at the
    // processor, and every refund we recorded is in a file.
    let (mut settled, mut refunds) = (Vec::<String>::new(), Vec::<String>::new());
    for (shard, db) in shards.pools() {
        let on = |e: sqlx::Error| anyhow::Error::new(e).context(format!("shard {shard}"));
        settled.extend(audits::settled_on(db, day).await.map_err(on)?);
        refunds.extend(audits::refunded_on(db, day).await.map_err(on)?);
    }
    let paid = onsale_projections::checks::settled_orders(pool, &settled).await?;
    for (order, status) in paid {
        if !captured.contains(order.as_str()) {
            report.unresolved.push(finding(
                "order_without_charge",
                &order,
                format!("{status} but no capture in the settlement files"),
            ));
        }
    }
    for order in refunds {
        if !refunded.contains(order.as_str()) {
            report.unresolved.push(finding(
                "refund_without_settlement",
                &order,
                "refunded but not in the settlement files",
            ));
        }
    }
    audits::reconciled(
        pool,
        day,
        report.unresolved.len(),
        serde_json::to_value(&report)?,
    )
    .await?;
    metrics::gauge!(onsale_telemetry::metrics::RECONCILIATION_MISMATCHES)
        .set(report.unresolved.len() as f64);
    metrics::counter!(onsale_telemetry::metrics::RECONCILIATION_RESOLVED_TOTAL)
        .increment(report.resolved.len() as u64);
    for f in &report.unresolved {
        tracing::error!(kind = %f.kind, reference = %f.reference, detail = %f.detail, "settlement mismatch");
    }
    Ok(report)
}

/// Records a capture the settlement file showed, answering the order's state after it.
async fn record_capture(
    shows: &Shows,
    order: OrderId,
    amount_cents: i64,
) -> Result<Option<OrderStatus>, String> {
    shows
        .execute(
            order.show(),
            ShowCommand::RecordPaymentSucceeded {
                order_id: order,
                amount_cents: Some(amount_cents),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    order_state(shows, order).await
}
