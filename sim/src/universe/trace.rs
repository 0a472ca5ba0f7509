//! The universe's trace: each command and answer in a line, short ids.

use super::*;

pub(super) fn key(k: &str, what: &str) -> Idempotency {
    Idempotency {
        key: IdempotencyKey::parse(k).expect("a key"),
        fingerprint: what.to_owned(),
    }
}

/// Records what a client was told, for the checks and for the fans' next moves.
pub(super) fn acknowledge(shared: &Shared, command: &ShowCommand, answer: &Answer) {
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

pub(super) fn describe(command: &ShowCommand) -> String {
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

pub(super) fn answered(answer: &Answer) -> String {
    match answer {
        Answer::Done => "done".into(),
        Answer::Hold(h) => format!("hold {} {:?}", short(h.hold_id.to_string()), h.seat_ids),
        Answer::Order(o) => format!("order {} {}", short(o.order_id.to_string()), o.status),
    }
}

/// A hold or order id by its own part (the show part is the same throughout): `h1f`.
pub(super) fn short(id: String) -> String {
    let kind = id.get(..1).unwrap_or("?");
    let own = id.rsplit('_').next().unwrap_or("").trim_start_matches('0');
    format!("{kind}{own}")
}
