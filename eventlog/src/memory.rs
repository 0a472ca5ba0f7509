//! The event log in memory, with the same contract as PostgreSQL's (all-or-none appends fenced
//! by the version, snapshots plus tail), and switchable faults: an append refused, an append
//! that commits but whose answer is lost, appends held until released. For unit tests of the
//! code above the log; integration tests use [`crate::PgEventLog`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use cqrs_es::{Aggregate, DomainEvent};
use onsale_domain::{Show, ShowEvent, ShowId, VenueEvent, VenueId, VENUE_TYPE};

use crate::{
    start_from, Claim, EventLog, Fold, LoadedShow, LogRow, Node, Result, ScanKey, StoreError,
};

/// What the next appends do besides (or instead of) committing.
#[derive(Debug, Default)]
struct Faults {
    /// Refused without committing.
    refuse: u32,
    /// Committed, then answered `Unavailable` (the answer was lost on the way back).
    lose_answer: u32,
}

#[derive(Debug, Default)]
struct State {
    rows: BTreeMap<(String, String), Vec<LogRow>>,
    snapshots: BTreeMap<String, Vec<(i64, String)>>,
    faults: Faults,
    appends: u64,
    /// Show -> (owning node, epoch). Nodes in memory are alive unless marked dead.
    owners: BTreeMap<ShowId, (uuid::Uuid, i64)>,
    nodes: BTreeMap<uuid::Uuid, Node>,
    dead: std::collections::BTreeSet<uuid::Uuid>,
    /// The last epoch handed out, for any show: epochs never go back, even for a show whose
    /// claim was released (PostgreSQL: the `show_owner_epochs` sequence).
    last_epoch: i64,
    /// Heartbeats fail (the database is unreachable from this process).
    heartbeats_fail: bool,
    /// Heartbeats wait unanswered (a primary died with the connections open).
    heartbeats_hang: bool,
}

#[derive(Debug, Clone)]
pub struct MemoryEventLog {
    state: Arc<Mutex<State>>,
    /// Appends wait for a permit; `hold_appends` takes them all away.
    gate: Arc<tokio::sync::Semaphore>,
    /// Wakes heartbeats waiting while `heartbeats_hang` (`hang_heartbeats(false)`).
    unhang: Arc<tokio::sync::Notify>,
}

const OPEN: usize = 1 << 20;

impl Default for MemoryEventLog {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(OPEN)),
            unhang: Arc::default(),
        }
    }
}

impl MemoryEventLog {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next `n` appends are refused (nothing commits).
    pub fn refuse_appends(&self, n: u32) {
        self.lock().faults.refuse = n;
    }

    /// The next `n` appends commit, but their callers hear `Unavailable`.
    pub fn lose_append_answers(&self, n: u32) {
        self.lock().faults.lose_answer = n;
    }

    /// Appends wait until [`Self::release_appends`]; returns once no append can start.
    pub async fn hold_appends(&self) {
        if let Ok(p) = self.gate.acquire_many(OPEN as u32).await {
            p.forget();
        }
    }

    pub fn release_appends(&self) {
        self.gate.add_permits(OPEN);
    }

    /// The epoch the show is claimed under now, if it is claimed.
    pub fn epoch(&self, show: ShowId) -> Option<i64> {
        self.lock().owners.get(&show).map(|o| o.1)
    }

    /// The node that holds the show's claim, if any.
    pub fn owner(&self, show: ShowId) -> Option<uuid::Uuid> {
        self.lock().owners.get(&show).map(|o| o.0)
    }

    /// The node is presumed dead (its heartbeats stopped): its shows may be claimed by others.
    pub fn presume_dead(&self, node: uuid::Uuid) {
        self.lock().dead.insert(node);
    }

    /// Heartbeats fail from now on (`false`: they work again): a node cut off from the
    /// database, which cannot renew its lease.
    pub fn fail_heartbeats(&self, fail: bool) {
        self.lock().heartbeats_fail = fail;
    }

    /// Heartbeats wait, unanswered, from now on until `false`: a database whose primary died
    /// with the connections open (nothing refuses; nothing answers).
    pub fn hang_heartbeats(&self, hang: bool) {
        self.lock().heartbeats_hang = hang;
        if !hang {
            self.unhang.notify_waiters();
        }
    }

    /// How many appends committed.
    pub fn appends(&self) -> u64 {
        self.lock().appends
    }

    /// `start` with the show's events after it, up to `upto`, applied.
    fn fold(&self, id: &str, start: (Show, i64), upto: i64) -> Result<LoadedShow> {
        let after = start.1;
        let mut fold = Fold::new(id, start);
        if let Some(rows) = self
            .lock()
            .rows
            .get(&(Show::TYPE.to_owned(), id.to_owned()))
        {
            for r in rows
                .iter()
                .filter(|r| r.sequence > after && r.sequence <= upto)
            {
                fold.push(r.sequence, &r.payload)?;
            }
        }
        Ok(fold.done())
    }

    fn insert(&self, key: (String, String), after: i64, new: Vec<LogRow>) -> Result<()> {
        let mut state = self.lock();
        let rows = state.rows.entry(key).or_default();
        if rows.len() as i64 != after {
            return Err(StoreError::Conflict);
        }
        // Chained as the table's trigger chains them.
        let mut prev = rows.last().map_or(crate::chain::GENESIS, |r| r.hash);
        for mut row in new {
            row.hash = row.chain_from(&prev);
            prev = row.hash;
            rows.push(row);
        }
        state.appends += 1;
        Ok(())
    }
}

#[async_trait::async_trait]
impl EventLog for MemoryEventLog {
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[crate::Traced],
    ) -> Result<()> {
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let lose_answer = {
            let mut state = self.lock();
            // At the commit, as PostgreSQL checks it: an append held back while another node
            // claimed the show is fenced, not written under the old epoch.
            let fenced = state.owners.get(&show).map(|o| o.1) != Some(epoch);
            #[cfg(feature = "planted-bugs")]
            let fenced = fenced
                && !onsale_domain::plant::planted(onsale_domain::plant::Bug::AppendSkipsFence);
            if fenced {
                return Err(StoreError::Fenced);
            }
            if state.faults.refuse > 0 {
                state.faults.refuse -= 1;
                return Err(StoreError::Unavailable("refused (injected)".into()));
            }
            let lose = state.faults.lose_answer > 0;
            state.faults.lose_answer = state.faults.lose_answer.saturating_sub(1);
            lose
        };
        let metadata = crate::row_metadata(at, events.len(), traces);
        let rows = events
            .iter()
            .zip(after + 1..)
            .zip(metadata)
            .map(|((e, sequence), metadata)| {
                Ok(LogRow {
                    aggregate_type: Show::TYPE.to_owned(),
                    aggregate_id: show.to_string(),
                    sequence,
                    event_type: e.event_type(),
                    event_version: "1".into(),
                    payload: serde_json::to_string(e)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    metadata,
                    hash: crate::chain::GENESIS,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.insert((Show::TYPE.to_owned(), show.to_string()), after, rows)?;
        if lose_answer {
            return Err(StoreError::Unavailable(
                "the commit's answer was lost (injected)".into(),
            ));
        }
        Ok(())
    }

    async fn load(&self, show: ShowId) -> Result<LoadedShow> {
        let id = show.to_string();
        let snapshot = self
            .lock()
            .snapshots
            .get(&id)
            .and_then(|s| s.last().cloned());
        let start = start_from(&id, snapshot)?;
        self.fold(&id, start, i64::MAX)
    }

    async fn replay(&self, show: ShowId) -> Result<LoadedShow> {
        let id = show.to_string();
        self.fold(&id, (Show::default(), 0), i64::MAX)
    }

    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow> {
        let id = show.to_string();
        let snapshot = self.lock().snapshots.get(&id).and_then(|s| {
            s.iter()
                .filter(|(seq, _)| *seq <= upto)
                .max_by_key(|(seq, _)| *seq)
                .cloned()
        });
        let start = start_from(&id, snapshot)?;
        self.fold(&id, start, upto)
    }

    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>> {
        Ok(self
            .lock()
            .rows
            .get(&(Show::TYPE.to_owned(), show.to_owned()))
            .map(|rows| {
                rows.iter()
                    .filter(|r| r.sequence > after && r.sequence <= upto)
                    .take(usize::try_from(limit).unwrap_or(usize::MAX))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>> {
        Ok(self
            .lock()
            .rows
            .get(&(Show::TYPE.to_owned(), show.to_owned()))
            .and_then(|rows| {
                rows.iter()
                    .rev()
                    .find(|r| r.event_type == "SalePolicyChanged")
                    .cloned()
            }))
    }

    async fn recent_activity(&self, show: ShowId, events: i64) -> Result<crate::Activity> {
        let mut activity = crate::Activity::default();
        let state = self.lock();
        let Some(rows) = state.rows.get(&(Show::TYPE.to_owned(), show.to_string())) else {
            return Ok(activity);
        };
        let n = usize::try_from(events).unwrap_or(0);
        for row in rows.iter().rev().take(n) {
            match serde_json::from_str::<ShowEvent>(&row.payload) {
                Ok(ShowEvent::SeatsHeld { seat_ids, .. }) => {
                    activity.holds += 1;
                    activity.seats_held += i64::try_from(seat_ids.len()).unwrap_or(i64::MAX);
                }
                Ok(ShowEvent::OrderPlaced { .. }) => activity.orders += 1,
                Ok(_) => {}
                Err(e) => return Err(StoreError::Corrupt(format!("{show}@{}: {e}", row.sequence))),
            }
        }
        Ok(activity)
    }

    async fn heads(&self) -> Result<Vec<(String, i64)>> {
        Ok(self
            .lock()
            .rows
            .iter()
            .filter(|((t, _), _)| t == Show::TYPE)
            .map(|((_, id), rows)| (id.clone(), rows.len() as i64))
            .collect())
    }

    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>> {
        Ok(self
            .lock()
            .rows
            .values()
            .flatten()
            .filter(|r| {
                (r.aggregate_type.clone(), r.aggregate_id.clone(), r.sequence) > *after
                    && show.is_none_or(|s| s == r.aggregate_id)
            })
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .cloned()
            .collect())
    }

    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()> {
        let mut state = self.lock();
        let snaps = state.snapshots.entry(show.to_string()).or_default();
        if snaps.iter().all(|(v, _)| *v != version) {
            snaps.push((version, payload.to_owned()));
            snaps.sort_by_key(|(v, _)| *v);
        }
        let keep = snaps.len().saturating_sub(2);
        snaps.drain(..keep);
        Ok(())
    }

    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()> {
        let row = LogRow {
            aggregate_type: VENUE_TYPE.to_owned(),
            aggregate_id: venue.to_string(),
            sequence: 1,
            event_type: event.event_type().to_owned(),
            event_version: "1".into(),
            payload: serde_json::to_string(event)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            metadata: "{}".into(),
            hash: crate::chain::GENESIS,
        };
        self.insert((VENUE_TYPE.to_owned(), venue.to_string()), 0, vec![row])
    }

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>> {
        let state = self.lock();
        state
            .rows
            .get(&(VENUE_TYPE.to_owned(), venue.to_string()))
            .and_then(|rows| rows.first())
            .map(|r| {
                serde_json::from_str(&r.payload).map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .transpose()
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }

    async fn claim(&self, show: ShowId, node: &Node, _ttl: std::time::Duration) -> Result<Claim> {
        let mut state = self.lock();
        state.nodes.insert(node.id, node.clone());
        state.dead.remove(&node.id);
        let current = state.owners.get(&show).copied();
        match current {
            Some((owner, _)) if owner != node.id && !state.dead.contains(&owner) => {
                let other = state.nodes.get(&owner).cloned().unwrap_or(Node {
                    id: owner,
                    addr: String::new(),
                });
                Ok(Claim::Elsewhere(other))
            }
            _ => {
                state.last_epoch += 1;
                let epoch = state.last_epoch;
                state.owners.insert(show, (node.id, epoch));
                Ok(Claim::Owned { epoch })
            }
        }
    }

    async fn release(&self, show: ShowId, epoch: i64) -> Result<()> {
        let mut state = self.lock();
        if state.owners.get(&show).is_some_and(|o| o.1 == epoch) {
            state.owners.remove(&show);
        }
        Ok(())
    }

    async fn heartbeat(&self, node: &Node, _ttl: std::time::Duration) -> Result<Vec<ShowId>> {
        // Waits only while hung: a universe of the simulator never hangs, so never awaits here
        // (ADR 020: nothing it runs may wait on a wake order it does not choose).
        loop {
            let unhung = self.unhang.notified();
            if !self.lock().heartbeats_hang {
                break;
            }
            unhung.await;
        }
        let mut state = self.lock();
        if state.heartbeats_fail {
            return Err(StoreError::Unavailable(
                "heartbeat refused (injected)".into(),
            ));
        }
        state.nodes.insert(node.id, node.clone());
        state.dead.remove(&node.id);
        Ok(state
            .owners
            .iter()
            .filter(|(_, o)| o.0 == node.id)
            .map(|(s, _)| *s)
            .collect())
    }

    async fn leave(&self, node: &Node) -> Result<()> {
        let mut state = self.lock();
        state.owners.retain(|_, o| o.0 != node.id);
        state.dead.insert(node.id);
        Ok(())
    }

    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>> {
        let state = self.lock();
        Ok(state
            .owners
            .iter()
            .filter(|(_, o)| state.dead.contains(&o.0))
            .map(|(s, _)| *s)
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect())
    }
}

#[cfg(test)]
impl MemoryEventLog {
    /// The epoch of a new node's claim of the free `show` (the unit tests' way to append).
    pub(crate) async fn claimed_by_a_new_node(&self, show: ShowId) -> i64 {
        let node = Node {
            id: uuid::Uuid::new_v4(),
            addr: String::new(),
        };
        let ttl = std::time::Duration::from_secs(5);
        let Claim::Owned { epoch } = self.claim(show, &node, ttl).await.expect("claim") else {
            panic!("a free show is claimed");
        };
        epoch
    }
}

#[cfg(test)]
mod tests {
    use onsale_domain::HoldId;

    use super::*;

    async fn claimed(log: &MemoryEventLog, show: ShowId) -> i64 {
        log.claimed_by_a_new_node(show).await
    }

    #[tokio::test]
    async fn appends_are_fenced_by_the_version_and_read_back_in_order() {
        let log = MemoryEventLog::default();
        let show = ShowId::random();
        let released = |_| ShowEvent::HoldReleased {
            hold_id: HoldId::new(show),
        };
        let two: Vec<ShowEvent> = (0..2).map(released).collect();
        let epoch = claimed(&log, show).await;
        log.append(show, epoch, 0, Utc::now(), &two, &[])
            .await
            .expect("first");
        assert!(matches!(
            log.append(show, epoch, 1, Utc::now(), &two, &[]).await,
            Err(StoreError::Conflict)
        ));
        log.append(show, epoch, 2, Utc::now(), &two[..1], &[])
            .await
            .expect("after the head");
        let events = log.events(show).await.expect("events");
        let sequences: Vec<i64> = events.iter().map(|e| e.sequence).collect();
        assert_eq!(sequences, [1, 2, 3]);
        assert!(events.iter().all(|e| e.event_type == "HoldReleased"));
        assert_eq!(log.heads().await.expect("heads"), [(show.to_string(), 3)]);
    }

    #[tokio::test]
    async fn a_load_up_to_a_sequence_starts_at_the_newest_snapshot_not_past_it() {
        let log = MemoryEventLog::default();
        let show = ShowId::random();
        let five: Vec<ShowEvent> = (0..5)
            .map(|_| ShowEvent::HoldReleased {
                hold_id: HoldId::new(show),
            })
            .collect();
        let epoch = claimed(&log, show).await;
        log.append(show, epoch, 0, Utc::now(), &five, &[])
            .await
            .expect("appended");
        let empty = Show::default().snapshot_copy().to_json().expect("json");
        for at in [2, 4] {
            log.save_snapshot(show, at, &empty).await.expect("snapshot");
        }
        let from = |upto| {
            let log = log.clone();
            async move {
                let l = log.load_upto(show, upto).await.expect("loaded");
                (l.snapshot_version, l.version)
            }
        };
        assert_eq!(from(1).await, (0, 1), "before every snapshot: from zero");
        assert_eq!(from(3).await, (2, 3));
        assert_eq!(from(4).await, (4, 4));
        assert_eq!(from(5).await, (4, 5));
        assert_eq!(from(9).await, (4, 5), "the log ends at 5");
    }

    #[tokio::test]
    async fn a_claim_by_another_node_fences_the_old_owners_appends() {
        let log = MemoryEventLog::default();
        let show = ShowId::random();
        let ttl = std::time::Duration::from_secs(5);
        let (a, b) = (
            Node {
                id: uuid::Uuid::new_v4(),
                addr: "a".into(),
            },
            Node {
                id: uuid::Uuid::new_v4(),
                addr: "b".into(),
            },
        );
        let Claim::Owned { epoch: old } = log.claim(show, &a, ttl).await.expect("a") else {
            panic!("a free show is claimed");
        };
        assert_eq!(
            log.claim(show, &b, ttl).await.expect("b"),
            Claim::Elsewhere(a.clone())
        );
        log.presume_dead(a.id);
        assert_eq!(log.orphans(10).await.expect("orphans"), [show]);
        let Claim::Owned { epoch } = log.claim(show, &b, ttl).await.expect("b again") else {
            panic!("a dead node's show is claimed");
        };
        assert!(epoch > old);
        let e = [ShowEvent::HoldReleased {
            hold_id: HoldId::new(show),
        }];
        assert!(matches!(
            log.append(show, old, 0, Utc::now(), &e, &[]).await,
            Err(StoreError::Fenced)
        ));
        log.append(show, epoch, 0, Utc::now(), &e, &[])
            .await
            .expect("the new owner appends");
        assert!(log.heartbeat(&a, ttl).await.expect("a wakes").is_empty());
    }

    #[tokio::test]
    async fn an_epoch_never_goes_back_when_a_claim_is_released_or_its_node_leaves() {
        let log = MemoryEventLog::default();
        let ttl = std::time::Duration::from_secs(5);
        let show = ShowId::random();
        let a = Node {
            id: uuid::Uuid::new_v4(),
            addr: "a".into(),
        };
        let Claim::Owned { epoch: first } = log.claim(show, &a, ttl).await.expect("a") else {
            panic!("a free show is claimed");
        };
        log.release(show, first).await.expect("release");
        let Claim::Owned { epoch: second } = log.claim(show, &a, ttl).await.expect("again") else {
            panic!("a released show is claimed");
        };
        assert!(second > first, "{second} after {first}");
        log.leave(&a).await.expect("leave");
        let Claim::Owned { epoch: third } = log.claim(show, &a, ttl).await.expect("back") else {
            panic!("a show of a node that left is claimed");
        };
        assert!(third > second, "{third} after {second}");
        let e = [ShowEvent::HoldReleased {
            hold_id: HoldId::new(show),
        }];
        for stale in [first, second] {
            assert!(matches!(
                log.append(show, stale, 0, Utc::now(), &e, &[]).await,
                Err(StoreError::Fenced)
            ));
        }
    }
}
