//! Regions (docs/adr/024): a deployment's shows are written in one region at a time, and a
//! standby region takes over only by a promotion that can prove the old writer cannot go on.
//!
//! Every region runs the whole stack; the writer region's PostgreSQL clusters (the main
//! database and each shard) stream their WAL synchronously to the standby region's, which
//! serve reads from the replayed copies. Which region writes is data in the main database (a
//! row per region, one of them the writer, under an epoch that grows at every promotion), so
//! it replicates with everything else. This module decides, from facts a process or an
//! operator's command gathered, what a process may do ([`mode`]) and whether a promotion is
//! safe ([`decide`]); it does no I/O.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A region's name: lowercase letters, digits and dashes, 1-32 of them, starting with a letter
/// (it names processes, problem documents and the stack's directories).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RegionName(String);

impl RegionName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RegionName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=32).contains(&s.len())
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "a region is named by 1-32 lowercase letters, digits and dashes, starting with a letter (got {s:?})"
            ))
        }
    }
}

impl TryFrom<String> for RegionName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<RegionName> for String {
    fn from(r: RegionName) -> Self {
        r.0
    }
}

impl fmt::Display for RegionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A position in a cluster's write-ahead log (PostgreSQL's `pg_lsn`, written `16/B374D848`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl FromStr for Lsn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (hi, lo) = s
            .split_once('/')
            .ok_or_else(|| format!("not an LSN: {s:?}"))?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| format!("not an LSN: {s:?}"))?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| format!("not an LSN: {s:?}"))?;
        Ok(Self((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The writer as a main database records it: its region and the epoch it became the writer
/// in (1 for the region a deployment started in, one more at every promotion).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Writer {
    pub region: RegionName,
    pub epoch: i64,
}

/// What a process may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Its region writes: it owns shows, appends, runs the workers, the relay and the
    /// projections.
    Writer { epoch: i64 },
    /// It serves reads from its region's copies and refuses every write, naming where writes
    /// go (`None`: no region has written yet).
    Standby { writer: Option<RegionName> },
}

/// What a process of region `me` may do, given whether its main database is replaying another
/// cluster's WAL (a standby) and the writer that database records. Only a process whose main
/// database accepts writes *and* names its own region the writer writes; a primary that names
/// another region (a cluster brought back as a primary after its region was replaced, which
/// the promotion's procedure forbids) is read-only, never a second writer. A database that
/// names no writer yet is the first region's: its process writes and records itself (epoch 1).
pub fn mode(me: &RegionName, in_recovery: bool, writer: Option<&Writer>) -> Mode {
    match (in_recovery, writer) {
        (true, w) => Mode::Standby {
            writer: w.map(|w| w.region.clone()),
        },
        (false, None) => Mode::Writer { epoch: 1 },
        (false, Some(w)) if &w.region == me => Mode::Writer { epoch: w.epoch },
        (false, Some(w)) => Mode::Standby {
            writer: Some(w.region.clone()),
        },
    }
}

/// What the old writer's cluster answers a promotion's probe with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Upstream {
    /// No answer (stopped, cut off): it cannot take a write, and with synchronous commit to
    /// this region it acknowledged none this region does not have.
    Unreachable,
    /// It answers as a standby (it rejoined, or it was demoted): it takes no write.
    Standby,
    /// It answers as a primary: it may still be taking writes.
    Primary,
}

/// How long a standby's received and replayed positions must stand still before the gap
/// between them is taken for a torn last record ([`ClusterFacts::replay_at_rest`]).
pub const REPLAY_AT_REST: std::time::Duration = std::time::Duration::from_secs(2);

/// One of the promoting region's clusters (its main database or a shard), as probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFacts {
    /// How the operator knows it: "main", "shard 2".
    pub name: String,
    /// Replaying the writer's WAL (a standby), or promoted already.
    pub in_recovery: bool,
    /// The last WAL position received from the writer and flushed (standbys only).
    pub received: Option<Lsn>,
    /// The last position replayed (standbys only).
    pub replayed: Option<Lsn>,
    /// Neither position moved over the last [`REPLAY_AT_REST`]: what was received and not
    /// replayed is a record the old writer never finished sending (it died mid-record), which
    /// no replay will ever complete. It holds no acknowledged commit: a synchronous commit is
    /// acknowledged only once this standby flushed the whole commit record, and a complete
    /// record is replayed without waiting for anything (and by the promotion itself, which
    /// replays every complete record received before it ends recovery).
    pub replay_at_rest: bool,
    /// Its upstream, the old writer's cluster.
    pub upstream: Upstream,
}

/// Why a promotion (or a rejoin) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{cluster}: the old writer's cluster still answers as a primary; cut it off or stop it first (a promotion now would make two writers)")]
    OldWriterAlive { cluster: String },
    #[error("{cluster}: replayed to {replayed} of {received} received; wait for the replay (promoting now would lose acknowledged writes)")]
    NotReplayed {
        cluster: String,
        received: Lsn,
        replayed: Lsn,
    },
    #[error("{cluster}: has never received the writer's WAL; it is no copy of the writer")]
    NeverStreamed { cluster: String },
    #[error("{region} is the writer already")]
    AlreadyWriter { region: RegionName },
    #[error("{writer} (epoch {theirs}) is no newer writer than this cluster's record (epoch {ours}); following it would throw away writes acknowledged since")]
    StaleWriter {
        writer: RegionName,
        theirs: i64,
        ours: i64,
    },
}

/// What a promotion does when it is safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// The clusters to promote (the indexes of those still in recovery), shards before the
    /// main database: the main database's writer row is the commit point of the whole.
    pub promote: Vec<usize>,
    /// The new writer's epoch.
    pub epoch: i64,
}

/// Whether region `me` may become the writer now, given the writer its main database records
/// and its clusters (index 0 the main database). A promotion interrupted after some shards
/// were promoted is finished by running it again: promoted shards are left as they are.
pub fn decide(
    me: &RegionName,
    writer: Option<&Writer>,
    clusters: &[ClusterFacts],
) -> Result<Promotion, Refusal> {
    let main_promoted = clusters.first().is_some_and(|m| !m.in_recovery);
    if main_promoted && writer.is_some_and(|w| &w.region == me) {
        return Err(Refusal::AlreadyWriter { region: me.clone() });
    }
    // Every cluster still a standby must be a whole copy of the writer that nothing can add to.
    // (A main database promoted while it names another writer is a promotion that stopped
    // between the promote and the writer row: running it again finishes it.)
    for c in clusters.iter().filter(|c| c.in_recovery) {
        if c.upstream == Upstream::Primary {
            return Err(Refusal::OldWriterAlive {
                cluster: c.name.clone(),
            });
        }
        match (c.received, c.replayed) {
            (Some(received), Some(replayed)) if replayed < received && !c.replay_at_rest => {
                return Err(Refusal::NotReplayed {
                    cluster: c.name.clone(),
                    received,
                    replayed,
                })
            }
            (Some(_), Some(_)) => {}
            _ => {
                return Err(Refusal::NeverStreamed {
                    cluster: c.name.clone(),
                })
            }
        }
    }
    let mut promote: Vec<usize> = (1..clusters.len())
        .filter(|&i| clusters[i].in_recovery)
        .collect();
    if !main_promoted && !clusters.is_empty() {
        promote.push(0);
    }
    Ok(Promotion {
        promote,
        epoch: writer.map_or(1, |w| w.epoch) + 1,
    })
}

/// Whether a cluster whose main database records `ours` may be rewound onto `theirs` and
/// follow it as a standby: only a writer promoted after the one it records (a higher epoch).
/// Rewinding a cluster throws away what it wrote past the point the two timelines split; that
/// is safe only for the old writer's unacknowledged tail, never for a newer writer's writes.
pub fn may_follow(ours: Option<&Writer>, theirs: &Writer) -> Result<(), Refusal> {
    match ours {
        Some(o) if o.epoch >= theirs.epoch => Err(Refusal::StaleWriter {
            writer: theirs.region.clone(),
            theirs: theirs.epoch,
            ours: o.epoch,
        }),
        _ => Ok(()),
    }
}
