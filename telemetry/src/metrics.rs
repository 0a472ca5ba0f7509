//! Every metric onsale exports, named once and described (the help text on `/metrics`), and
//! the per-show label, bounded so that a platform with many shows does not grow `/metrics`
//! without limit. The design's signals (design.md §10): hold p99 ([`HOLD_SECONDS`]), the 409 rate
//! ([`HOLD_REQUESTS_TOTAL`]), conversion ([`EVENTS_COMMITTED_TOTAL`]), relay and projection
//! lag, the oldest pending payment, the admission rate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use metrics::{describe_counter, describe_gauge, describe_histogram};

/// Of the positions the line passed recently, the share that became sessions (per show).
pub const ADMISSION_CLAIM_RATE: &str = "onsale_admission_claim_rate";
/// How far the booking path's health scales the admission target N, at its lowest over the
/// shows with a line (1 = full, 0 = paused; each show's in [`SHOW_ADMISSION_FACTOR`]).
pub const ADMISSION_FACTOR: &str = "onsale_admission_factor";
/// How far a show's own booking path's health (and the store's and processor's) scales its
/// admission target N, by show.
pub const SHOW_ADMISSION_FACTOR: &str = "onsale_show_admission_factor";
/// The concurrency target N the line admits toward for a show (before the health factor): the
/// configured N, or what the sale's conversion and seats left call for within the bounds.
pub const ADMISSION_TARGET: &str = "onsale_admission_target";
/// 1 while fans wait, admission is not paused, and nobody was admitted for 30 s (per show).
pub const ADMISSION_STALLED: &str = "onsale_admission_stalled";
/// 1 while no seat is available, so the line is held back (SOLD_OUT or SEATS_MAY_RETURN; per
/// show).
pub const ADMISSION_SOLD_OUT: &str = "onsale_admission_sold_out";
/// 1 while the card processor is failing payments (admission pauses: orders could not be paid).
pub const PROCESSOR_FAILING: &str = "onsale_processor_failing";
/// Positions the line advanced past (per show).
pub const ADMITTED_POSITIONS_TOTAL: &str = "onsale_admitted_positions_total";
/// The line's admitted_through: every position at or below it may enter (per show).
pub const ADMITTED_THROUGH: &str = "onsale_admitted_through";
/// Admitter ticks that failed (Redis away).
pub const ADMITTER_ERRORS_TOTAL: &str = "onsale_admitter_errors_total";
/// Time of one admitter tick of one show.
pub const ADMITTER_TICK_SECONDS: &str = "onsale_admitter_tick_seconds";
/// Commands refused with 503 OVERLOADED because their show's queue was full.
pub const COMMANDS_SHED_TOTAL: &str = "onsale_commands_shed_total";
/// Commands (and queries) sent to the node that owns their show.
pub const COMMANDS_FORWARDED_TOTAL: &str = "onsale_commands_forwarded_total";
/// Appends refused by the ownership fence (another node claimed the show).
pub const APPENDS_FENCED_TOTAL: &str = "onsale_appends_fenced_total";
/// 1 while this process is the active instance of a singleton job (`job` label).
pub const SINGLETON_ACTIVE: &str = "onsale_singleton_active";
/// When the last signed checkpoint of the log's heads was taken (Unix seconds).
pub const CHECKPOINT_TAKEN_SECONDS: &str = "onsale_checkpoint_taken_timestamp_seconds";
/// Checkpoints that could not be taken or written.
pub const CHECKPOINT_FAILURES_TOTAL: &str = "onsale_checkpoint_failures_total";
/// Shows this node claimed (first touch, a dead node's show, or after a fence).
pub const SHOWS_CLAIMED_TOTAL: &str = "onsale_shows_claimed_total";
/// Commands an owner did not answer because its node could not prove its lease (paused or cut
/// off from the database past the node TTL).
pub const LEASE_UNPROVEN_TOTAL: &str = "onsale_lease_unproven_total";
/// Requests naming a hold or order their show does not have, answered without its owner's
/// queue.
pub const UNKNOWN_IDS_TOTAL: &str = "onsale_unknown_ids_total";
/// A part of a process (worker, relay, projections, ...) stopped before shutdown and was
/// started again, by part.
pub const PART_RESTARTS_TOTAL: &str = "onsale_part_restarts_total";
/// Events the relay published without the card token they were stored with (orders placed
/// before the card vault).
pub const RELAY_SCRUBBED_TOTAL: &str = "onsale_relay_scrubbed_total";
/// Forwarded requests refused on the internal route (unsigned, forged, stale or replayed), and
/// owners' answers the forwarding node refused.
pub const FORWARDS_REFUSED_TOTAL: &str = "onsale_forwards_refused_total";
/// Commands per group commit.
pub const COMMIT_BATCH_COMMANDS: &str = "onsale_commit_batch_commands";
/// Time of one group commit (the append of a batch).
pub const COMMIT_SECONDS: &str = "onsale_commit_seconds";
/// Events committed, by type (OrderPlaced over SeatsHeld is the hold-to-purchase conversion).
pub const EVENTS_COMMITTED_TOTAL: &str = "onsale_events_committed_total";
/// Hold requests answered, by outcome (the 409 rate is conflict over all).
pub const HOLD_REQUESTS_TOTAL: &str = "onsale_hold_requests_total";
/// How long the oldest hold still active is past its expiry (0 when none is): the sweeper's
/// lag, read from the holds read model by the invariant monitor.
pub const HOLD_EXPIRY_LAG_SECONDS: &str = "onsale_hold_expiry_lag_seconds";
/// How late a show owner's sweep takes the hold that lapsed first (seconds past its expiry).
pub const SWEEP_LAG_SECONDS: &str = "onsale_sweep_lag_seconds";
/// Hold request latency at the edge.
pub const HOLD_SECONDS: &str = "onsale_hold_seconds";
/// Violations the invariant monitor found in its last run, by check (must be 0).
pub const INVARIANT_VIOLATIONS: &str = "onsale_invariant_violations";
/// Live waiting-room sessions (per show).
pub const LIVE_SESSIONS: &str = "onsale_live_sessions";
/// Paid orders cancelled.
pub const ORDERS_CANCELLED_TOTAL: &str = "onsale_orders_cancelled_total";
/// Charge calls sent to the processor (retries included; each under the order's key).
pub const PAYMENT_CHARGE_CALLS_TOTAL: &str = "onsale_payment_charge_calls_total";
/// Orders failed because their payment stayed unknown past the ambiguity bound.
pub const PAYMENT_FORCED_RESOLUTIONS_TOTAL: &str = "onsale_payment_forced_resolutions_total";
/// How long the oldest payment due has waited for a worker to claim it (0 when none waits).
pub const PAYMENT_OLDEST_UNCLAIMED_SECONDS: &str = "onsale_payment_oldest_unclaimed_seconds";
/// Payments on the work list not resolved yet (the outbox's depth).
pub const PAYMENT_OUTBOX_DEPTH: &str = "onsale_payment_outbox_depth";
/// Age of the oldest payment not resolved yet.
pub const PAYMENT_OLDEST_PENDING_SECONDS: &str = "onsale_payment_oldest_pending_seconds";
/// Payment outcomes the show's state table refused (the order had already moved).
pub const PAYMENT_OUTCOMES_REFUSED_TOTAL: &str = "onsale_payment_outcomes_refused_total";
/// Processor answers that did not say what happened (asked again later).
pub const PAYMENT_UNKNOWN_TOTAL: &str = "onsale_payment_unknown_total";
/// Payment worker rounds that failed (database away).
pub const PAYMENT_WORKER_ERRORS_TOTAL: &str = "onsale_payment_worker_errors_total";
/// Messages on the topic a projection could not read, by projection.
pub const PROJECTION_BAD_MESSAGES_TOTAL: &str = "onsale_projection_bad_messages_total";
/// Batches a projection threw away because another process had moved a show's position.
pub const PROJECTION_CONFLICTS_TOTAL: &str = "onsale_projection_conflicts_total";
/// Events a projection skipped as already applied, by projection.
pub const PROJECTION_DUPLICATES_TOTAL: &str = "onsale_projection_duplicates_total";
/// Messages a projection refused because they do not chain from the show's log (forged, or
/// a broken relay: issue 53 item 7), by projection.
pub const PROJECTION_UNCHAINED_TOTAL: &str = "onsale_projection_unchained_total";
/// Projection restarts after an error, by projection.
pub const PROJECTION_ERRORS_TOTAL: &str = "onsale_projection_errors_total";
/// Shows whose fold a projection process holds in memory, by projection.
pub const PROJECTION_FOLDS: &str = "onsale_projection_folds";
/// Events a projection read from the log to load shows' folds (after each show's snapshot, up
/// to its stored positions), by projection.
pub const PROJECTION_LOAD_EVENTS_TOTAL: &str = "onsale_projection_load_events_total";
/// Gaps and stalls a projection filled from the events table, by projection.
pub const PROJECTION_GAP_FILLS_TOTAL: &str = "onsale_projection_gap_fills_total";
/// A show's events a projection left to the gap check because its log could not be read (its
/// shard down), by projection.
pub const PROJECTION_SHOWS_DEFERRED_TOTAL: &str = "onsale_projection_shows_deferred_total";
/// A projection's last batch: commit-to-apply lag (ms), by projection.
pub const PROJECTION_LAG_MS: &str = "onsale_projection_lag_ms";
/// Commit-to-apply lag of each projected event, by projection.
pub const PROJECTION_LAG_SECONDS: &str = "onsale_projection_lag_seconds";
/// Time since a projection last reported (ms), by projection.
pub const PROJECTION_SILENCE_MS: &str = "onsale_projection_silence_ms";
/// Fans in a show's line behind admitted_through (per show).
pub const QUEUE_DEPTH: &str = "onsale_queue_depth";
/// Settlement mismatches the last reconciliation left unresolved (must be 0).
pub const RECONCILIATION_MISMATCHES: &str = "onsale_reconciliation_mismatches";
/// Settlement mismatches reconciliation resolved (late captures, orphan charges).
pub const RECONCILIATION_RESOLVED_TOTAL: &str = "onsale_reconciliation_resolved_total";
/// Age of the oldest refund owed and not made yet.
pub const REFUND_OLDEST_PENDING_SECONDS: &str = "onsale_refund_oldest_pending_seconds";
/// Refunds the processor made.
pub const REFUNDS_TOTAL: &str = "onsale_refunds_total";
/// Commands whose caller stopped waiting for the commit (the store held it past the bound:
/// a primary with no synchronous standby) and was answered 503.
pub const COMMITS_TIMED_OUT_TOTAL: &str = "onsale_commits_timed_out_total";
/// Commands the domain refused (they wrote nothing).
pub const REFUSALS_TOTAL: &str = "onsale_refusals_total";
/// Relay steps that failed (broker or database away) and were retried.
pub const RELAY_ERRORS_TOTAL: &str = "onsale_relay_errors_total";
/// Events the relay published to Kafka.
pub const RELAY_EVENTS_TOTAL: &str = "onsale_relay_events_total";
/// Events republished from the table after the relay's slot was (re)created (a failover).
pub const RELAY_GAP_EVENTS_TOTAL: &str = "onsale_relay_gap_events_total";
/// Slots the relay created because its slot was missing (first start, or a promoted primary).
pub const RELAY_SLOTS_CREATED_TOTAL: &str = "onsale_relay_slots_created_total";
/// WAL bytes the relay's slot has not confirmed.
pub const RELAY_LAG_BYTES: &str = "onsale_relay_lag_bytes";
/// Ticket scans at the gate, by result.
pub const SCANS_TOTAL: &str = "onsale_scans_total";
/// Shows the query side's search index holds.
pub const SEARCH_INDEX_DOCUMENTS: &str = "onsale_search_index_documents";
/// Show documents the search index took in (a show scheduled, or its band of seats left moved).
pub const SEARCH_INDEX_UPDATES_TOTAL: &str = "onsale_search_index_updates_total";
/// Seat-map deltas the projection wrote.
pub const SEAT_MAP_DELTAS_TOTAL: &str = "onsale_seat_map_deltas_total";
/// Seat-map reads served.
pub const SEAT_MAP_READS_TOTAL: &str = "onsale_seat_map_reads_total";
/// Seat-map cache rebuilds (one per show, section and seq however many readers missed).
pub const SEAT_MAP_REBUILDS_TOTAL: &str = "onsale_seat_map_rebuilds_total";
/// The newest seat-map delta seq this process knows (per show).
pub const SEAT_MAP_SEQ: &str = "onsale_seat_map_seq";
/// Time to load a show (snapshot plus tail) into its owner.
pub const SHOW_LOAD_SECONDS: &str = "onsale_show_load_seconds";
/// Open SSE and gRPC delta streams.
pub const STREAM_SUBSCRIBERS: &str = "onsale_stream_subscribers";
/// How long the oldest confirmed order with a seat and no live ticket has been confirmed (0
/// when every confirmed seat has its ticket): the ticket issuer's lag.
pub const TICKET_ISSUANCE_LAG_SECONDS: &str = "onsale_ticket_issuance_lag_seconds";
/// Orders whose tickets were issued.
pub const TICKETS_ISSUED_ORDERS_TOTAL: &str = "onsale_tickets_issued_orders_total";
/// Appends refused by the version check (another writer appended first).
pub const VERSION_CONFLICTS_TOTAL: &str = "onsale_version_conflicts_total";
/// Admissions traded for a session.
pub const WAITING_ROOM_ENTRIES_TOTAL: &str = "onsale_waiting_room_entries_total";
/// Fans who joined a line.
pub const WAITING_ROOM_JOINS_TOTAL: &str = "onsale_waiting_room_joins_total";
/// Waiting-room requests that met Redis away.
pub const WAITING_ROOM_REDIS_ERRORS_TOTAL: &str = "onsale_waiting_room_redis_errors_total";
/// Processor webhooks applied.
pub const WEBHOOKS_APPLIED_TOTAL: &str = "onsale_webhooks_applied_total";
/// Processor webhooks already applied (a redelivery).
pub const WEBHOOKS_DUPLICATE_TOTAL: &str = "onsale_webhooks_duplicate_total";
/// Processor webhooks refused for a reason the processor cannot fix (acknowledged).
pub const WEBHOOKS_REFUSED_TOTAL: &str = "onsale_webhooks_refused_total";
/// Webhook deliveries answered 503 at once because as many as a process handles were in flight.
pub const WEBHOOKS_SHED_TOTAL: &str = "onsale_webhooks_shed_total";
/// Processor webhooks rejected for a bad or stale signature.
pub const WEBHOOKS_REJECTED_TOTAL: &str = "onsale_webhooks_rejected_total";

/// Gives every metric above its help text; called once when the recorder is installed.
pub fn describe() {
    for (kind, name, help) in HELP {
        match kind {
            Counter => describe_counter!(*name, *help),
            Gauge => describe_gauge!(*name, *help),
            Histogram => describe_histogram!(*name, *help),
        }
    }
}

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}
use Kind::{Counter, Gauge, Histogram};

/// Every metric's kind and help text, as `/metrics` describes it.
const HELP: &[(Kind, &str, &str)] = &[
    (Gauge, ADMISSION_CLAIM_RATE, "Of the positions the line passed recently, the share that became sessions (per show)."),
    (Gauge, ADMISSION_FACTOR, "How far the booking path's health scales the admission target N, at its lowest over the shows with a line (1 = full, 0 = paused)."),
    (Gauge, SHOW_ADMISSION_FACTOR, "How far a show's own booking path's health scales its admission target N, by show."),
    (Gauge, ADMISSION_TARGET, "The concurrency target N the line admits toward for a show, before the health factor (per show)."),
    (Gauge, ADMISSION_STALLED, "1 while fans wait, admission is not paused, and nobody was admitted for 30 s (per show)."),
    (Gauge, ADMISSION_SOLD_OUT, "1 while no seat is available, so the line is held back (SOLD_OUT or SEATS_MAY_RETURN; per show)."),
    (Gauge, PROCESSOR_FAILING, "1 while the card processor is failing payments (admission pauses: orders could not be paid)."),
    (Counter, ADMITTED_POSITIONS_TOTAL, "Positions the line advanced past (per show)."),
    (Gauge, ADMITTED_THROUGH, "The line's admitted_through: every position at or below it may enter (per show)."),
    (Counter, ADMITTER_ERRORS_TOTAL, "Admitter ticks that failed (Redis away)."),
    (Histogram, ADMITTER_TICK_SECONDS, "Time of one admitter tick of one show."),
    (Counter, COMMANDS_SHED_TOTAL, "Commands refused with 503 OVERLOADED because their show's queue was full."),
    (Counter, COMMANDS_FORWARDED_TOTAL, "Commands and queries forwarded to the node that owns their show."),
    (Counter, APPENDS_FENCED_TOTAL, "Appends refused by the ownership fence: another node had claimed the show."),
    (Gauge, SINGLETON_ACTIVE, "1 while this process is the active instance of a singleton job (relay, jobs, checkpoints)."),
    (Gauge, CHECKPOINT_TAKEN_SECONDS, "When the last signed checkpoint of the log's chain heads was taken (Unix seconds)."),
    (Counter, CHECKPOINT_FAILURES_TOTAL, "Signed checkpoints of the log's chain heads that could not be taken or written."),
    (Counter, SHOWS_CLAIMED_TOTAL, "Shows this node claimed (first touch, a dead node's show, or after a fence)."),
    (Counter, LEASE_UNPROVEN_TOTAL, "Commands an owner did not answer because its node could not prove its lease."),
    (Counter, UNKNOWN_IDS_TOTAL, "Requests naming a hold or order their show does not have, answered without its owner's queue."),
    (Counter, PART_RESTARTS_TOTAL, "A part of a process stopped before shutdown (a panic, a loop that returned) and was started again, by part."),
    (Counter, RELAY_SCRUBBED_TOTAL, "Events the relay published without the card token they were stored with (orders placed before the card vault)."),
    (Counter, FORWARDS_REFUSED_TOTAL, "Forwarded requests refused on the internal route (unsigned, forged, stale or replayed), and owners' answers the forwarding node refused (unsigned or forged)."),
    (Histogram, COMMIT_BATCH_COMMANDS, "Commands per group commit."),
    (Histogram, COMMIT_SECONDS, "Time of one group commit (the append of a batch)."),
    (Counter, EVENTS_COMMITTED_TOTAL, "Events committed, by type (OrderPlaced over SeatsHeld is the hold-to-purchase conversion)."),
    (Counter, HOLD_REQUESTS_TOTAL, "Hold requests answered, by outcome (the 409 rate is conflict over all)."),
    (Gauge, HOLD_EXPIRY_LAG_SECONDS, "How long the oldest hold still active is past its expiry (0 when none is)."),
    (Histogram, SWEEP_LAG_SECONDS, "How late a show owner's sweep takes the hold that lapsed first: seconds past its expiry."),
    (Histogram, HOLD_SECONDS, "Hold request latency at the edge."),
    (Gauge, PAYMENT_OLDEST_UNCLAIMED_SECONDS, "How long the oldest payment due has waited for a worker to claim it (0 when none waits)."),
    (Gauge, PAYMENT_OUTBOX_DEPTH, "Payments on the work list not resolved yet."),
    (Gauge, TICKET_ISSUANCE_LAG_SECONDS, "How long the oldest confirmed order with a seat and no live ticket has been confirmed (0 when none)."),
    (Gauge, INVARIANT_VIOLATIONS, "Violations the invariant monitor found in its last run, by check (must be 0)."),
    (Gauge, LIVE_SESSIONS, "Live waiting-room sessions (per show)."),
    (Counter, ORDERS_CANCELLED_TOTAL, "Paid orders cancelled."),
    (Counter, PAYMENT_CHARGE_CALLS_TOTAL, "Charge calls sent to the processor (retries included; each under the order's key)."),
    (Counter, PAYMENT_FORCED_RESOLUTIONS_TOTAL, "Orders failed because their payment stayed unknown past the ambiguity bound."),
    (Gauge, PAYMENT_OLDEST_PENDING_SECONDS, "Age of the oldest payment not resolved yet."),
    (Counter, PAYMENT_OUTCOMES_REFUSED_TOTAL, "Payment outcomes the show's state table refused (the order had already moved)."),
    (Counter, PAYMENT_UNKNOWN_TOTAL, "Processor answers that did not say what happened (asked again later)."),
    (Counter, PAYMENT_WORKER_ERRORS_TOTAL, "Payment worker rounds that failed (database away)."),
    (Counter, PROJECTION_BAD_MESSAGES_TOTAL, "Messages on the topic a projection could not read, by projection."),
    (Counter, PROJECTION_CONFLICTS_TOTAL, "Batches a projection threw away because another process had moved a show's position."),
    (Counter, PROJECTION_DUPLICATES_TOTAL, "Events a projection skipped as already applied, by projection."),
    (Counter, PROJECTION_UNCHAINED_TOTAL, "Messages a projection refused because they do not chain from the show's log, by projection."),
    (Counter, PROJECTION_ERRORS_TOTAL, "Projection restarts after an error, by projection."),
    (Gauge, PROJECTION_FOLDS, "Shows whose fold a projection process holds in memory (idle ones are dropped), by projection."),
    (Counter, PROJECTION_LOAD_EVENTS_TOTAL, "Events a projection read from the log to load shows' folds (after each show's snapshot), by projection."),
    (Counter, PROJECTION_GAP_FILLS_TOTAL, "Gaps and stalls a projection filled from the events table, by projection."),
    (Counter, PROJECTION_SHOWS_DEFERRED_TOTAL, "Shows whose events a projection left to the gap check because their log was unreadable (shard down)."),
    (Gauge, PROJECTION_LAG_MS, "A projection's last batch: commit-to-apply lag (ms), by projection."),
    (Histogram, PROJECTION_LAG_SECONDS, "Commit-to-apply lag of each projected event, by projection."),
    (Gauge, PROJECTION_SILENCE_MS, "Time since a projection last reported (ms), by projection."),
    (Gauge, QUEUE_DEPTH, "Fans in a show's line behind admitted_through (per show)."),
    (Gauge, RECONCILIATION_MISMATCHES, "Settlement mismatches the last reconciliation left unresolved (must be 0)."),
    (Counter, RECONCILIATION_RESOLVED_TOTAL, "Settlement mismatches reconciliation resolved (late captures, orphan charges)."),
    (Gauge, REFUND_OLDEST_PENDING_SECONDS, "Age of the oldest refund owed and not made yet."),
    (Counter, REFUNDS_TOTAL, "Refunds the processor made."),
    (Counter, COMMITS_TIMED_OUT_TOTAL, "Commands whose caller stopped waiting for the commit and was answered 503."),
    (Counter, REFUSALS_TOTAL, "Commands the domain refused (they wrote nothing)."),
    (Counter, RELAY_ERRORS_TOTAL, "Relay steps that failed (broker or database away) and were retried."),
    (Counter, RELAY_EVENTS_TOTAL, "Events the relay published to Kafka."),
    (Counter, RELAY_GAP_EVENTS_TOTAL, "Events republished from the table after the relay's slot was (re)created (a failover)."),
    (Counter, RELAY_SLOTS_CREATED_TOTAL, "Slots the relay created because its slot was missing (first start, or a promoted primary)."),
    (Gauge, RELAY_LAG_BYTES, "WAL bytes the relay's slot has not confirmed."),
    (Counter, SCANS_TOTAL, "Ticket scans at the gate, by result."),
    (Counter, SEAT_MAP_DELTAS_TOTAL, "Seat-map deltas the projection wrote."),
    (Counter, SEAT_MAP_READS_TOTAL, "Seat-map reads served."),
    (Counter, SEAT_MAP_REBUILDS_TOTAL, "Seat-map cache rebuilds (one per show, section and seq however many readers missed)."),
    (Gauge, SEARCH_INDEX_DOCUMENTS, "Shows the query side's search index holds."),
    (Counter, SEARCH_INDEX_UPDATES_TOTAL, "Show documents the search index took in (a show scheduled, or its band of seats left moved)."),
    (Gauge, SEAT_MAP_SEQ, "The newest seat-map delta seq this process knows (per show)."),
    (Histogram, SHOW_LOAD_SECONDS, "Time to load a show (snapshot plus tail) into its owner."),
    (Gauge, STREAM_SUBSCRIBERS, "Open SSE and gRPC delta streams."),
    (Counter, TICKETS_ISSUED_ORDERS_TOTAL, "Orders whose tickets were issued."),
    (Counter, VERSION_CONFLICTS_TOTAL, "Appends refused by the version check (another writer appended first)."),
    (Counter, WAITING_ROOM_ENTRIES_TOTAL, "Admissions traded for a session."),
    (Counter, WAITING_ROOM_JOINS_TOTAL, "Fans who joined a line."),
    (Counter, WAITING_ROOM_REDIS_ERRORS_TOTAL, "Waiting-room requests that met Redis away."),
    (Counter, WEBHOOKS_APPLIED_TOTAL, "Processor webhooks applied."),
    (Counter, WEBHOOKS_DUPLICATE_TOTAL, "Processor webhooks already applied (a redelivery)."),
    (Counter, WEBHOOKS_REFUSED_TOTAL, "Processor webhooks refused for a reason the processor cannot fix (acknowledged)."),
    (Counter, WEBHOOKS_REJECTED_TOTAL, "Processor webhooks rejected for a bad or stale signature."),
    (Counter, WEBHOOKS_SHED_TOTAL, "Webhook deliveries answered 503 at once: as many as a process handles were in flight."),
];

/// At most this many shows carry their own label at a time; the rest are counted as `other`.
pub const MAX_SHOW_LABELS: usize = 100;

/// A show label unused this long frees its place (the exporter forgets its series too).
pub const SHOW_LABEL_IDLE: Duration = Duration::from_secs(600);

/// The `show` label for `show`: its id while fewer than [`MAX_SHOW_LABELS`] shows were labelled
/// in the last [`SHOW_LABEL_IDLE`], else `other`.
pub fn show_label(show: &str) -> String {
    static LABELS: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);
    let now = Instant::now();
    let mut guard = LABELS.lock().unwrap_or_else(|p| p.into_inner());
    let labels = guard.get_or_insert_with(HashMap::new);
    if let Some(seen) = labels.get_mut(show) {
        *seen = now;
        return show.to_owned();
    }
    if labels.len() >= MAX_SHOW_LABELS {
        labels.retain(|_, seen| now.duration_since(*seen) < SHOW_LABEL_IDLE);
    }
    if labels.len() >= MAX_SHOW_LABELS {
        return "other".to_owned();
    }
    labels.insert(show.to_owned(), now);
    show.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_labels_are_bounded() {
        let labels: std::collections::BTreeSet<String> = (0..MAX_SHOW_LABELS * 3)
            .map(|i| show_label(&format!("show-{i}")))
            .collect();
        assert!(labels.len() <= MAX_SHOW_LABELS + 1, "{}", labels.len());
        assert!(labels.contains("other"));
        assert_eq!(
            show_label("show-0"),
            "show-0",
            "a labelled show keeps its label"
        );
    }

    /// The alerting rules (telemetry/alerts) read only metrics this module defines.
    #[test]
    fn the_rules_read_only_metrics_onsale_exports() {
        let rules = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/alerts/onsale.rules.yml"
        ))
        .expect("rules");
        let exported = include_str!("metrics.rs");
        let mut read = 0;
        for line in rules.lines().filter(|l| !l.trim_start().starts_with('#')) {
            let mut rest = line;
            while let Some(at) = rest.find("onsale_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                // Commands named in descriptions (`onsale reconcile`) are not metrics.
                assert!(
                    exported.contains(&format!("\"{name}\"")),
                    "the rules read {name}, which telemetry/src/metrics.rs does not define"
                );
                read += 1;
            }
        }
        assert!(read >= 10, "the rules read {read} metrics");
    }
}
