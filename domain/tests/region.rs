//! Two regions as PostgreSQL runs them (a primary streaming its WAL to the other region's
//! standby, synchronously or not), under any sequence of writes, cuts, stops, restarts,
//! promotions and rejoins: a promotion goes ahead only when `region::decide` allows it, each
//! process writes only when `region::mode` says so, and then
//! - at most one region can acknowledge a write at any moment, and
//! - every acknowledged write is in the log of the region that can acknowledge,
//!
//! with synchronous commit across regions. Without it (asynchronous), a sequence is found
//! that loses an acknowledged write: the RPO docs/adr/024 states for that mode.

use onsale_domain::region::{
    decide, may_follow, mode, ClusterFacts, Lsn, Mode, RegionName, Upstream, Writer,
};
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq)]
enum Role {
    /// Takes writes; `sync`: a commit waits for the other region's standby to flush it.
    Primary { sync: bool },
    /// Replays what it received from the other region.
    Standby,
}

#[derive(Debug, Clone)]
struct Cluster {
    name: RegionName,
    role: Role,
    up: bool,
    /// The WAL it flushed: write ids in order (the writer row is in it too: `writer`).
    log: Vec<u64>,
    replayed: usize,
    writer: Option<Writer>,
}

#[derive(Debug, Clone)]
struct World {
    regions: [Cluster; 2],
    link: bool,
    acked: Vec<u64>,
    next: u64,
    last_epoch: i64,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Write(usize),
    Stream,
    Replay,
    Cut,
    Heal,
    Stop(usize),
    Start(usize),
    Promote(usize),
    Rejoin(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize).prop_map(Op::Write),
        2 => Just(Op::Stream),
        2 => Just(Op::Replay),
        1 => Just(Op::Cut),
        1 => Just(Op::Heal),
        1 => (0..2usize).prop_map(Op::Stop),
        1 => (0..2usize).prop_map(Op::Start),
        1 => (0..2usize).prop_map(Op::Promote),
        1 => (0..2usize).prop_map(Op::Rejoin),
    ]
}

impl World {
    fn new(sync: bool) -> Self {
        let a: RegionName = "a".parse().expect("a region");
        let b: RegionName = "b".parse().expect("a region");
        let first = Writer {
            region: a.clone(),
            epoch: 1,
        };
        Self {
            regions: [
                Cluster {
                    name: a,
                    role: Role::Primary { sync },
                    up: true,
                    log: Vec::new(),
                    replayed: 0,
                    writer: Some(first.clone()),
                },
                Cluster {
                    name: b,
                    role: Role::Standby,
                    up: true,
                    log: Vec::new(),
                    replayed: 0,
                    writer: Some(first),
                },
            ],
            link: true,
            acked: Vec::new(),
            next: 1,
            last_epoch: 1,
        }
    }

    fn mode(&self, i: usize) -> Mode {
        let c = &self.regions[i];
        mode(&c.name, c.role == Role::Standby, c.writer.as_ref())
    }

    /// Whether `j` streams from `i`: the link is up, both run, `j` is a standby whose WAL is a
    /// prefix of `i`'s (it follows `i`'s timeline).
    fn follows(&self, j: usize, i: usize) -> bool {
        let (p, s) = (&self.regions[i], &self.regions[j]);
        self.link
            && p.up
            && s.up
            && matches!(p.role, Role::Primary { .. })
            && s.role == Role::Standby
            && p.log.starts_with(&s.log)
            && p.writer == s.writer.clone().or(p.writer.clone())
    }

    /// Whether region `i` can acknowledge a write now.
    fn can_ack(&self, i: usize) -> bool {
        let c = &self.regions[i];
        c.up && matches!(self.mode(i), Mode::Writer { .. })
            && match c.role {
                Role::Primary { sync: true } => self.follows(1 - i, i),
                Role::Primary { sync: false } => true,
                Role::Standby => false,
            }
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Write(i) => {
                let c = &self.regions[i];
                if !c.up || !matches!(self.mode(i), Mode::Writer { .. }) {
                    return;
                }
                let Role::Primary { sync } = c.role else {
                    return;
                };
                let id = self.next;
                self.next += 1;
                // Committed locally whatever happens next; acknowledged only once the other
                // region flushed it (synchronous) or at once (asynchronous).
                let ack = !sync || self.follows(1 - i, i);
                self.regions[i].log.push(id);
                if sync && ack {
                    let log = self.regions[i].log.clone();
                    self.regions[1 - i].log = log;
                }
                if ack {
                    self.acked.push(id);
                }
            }
            Op::Stream => {
                for i in 0..2 {
                    if self.follows(1 - i, i) {
                        let (log, writer) =
                            (self.regions[i].log.clone(), self.regions[i].writer.clone());
                        let s = &mut self.regions[1 - i];
                        s.log = log;
                        s.writer = writer;
                    }
                }
            }
            Op::Replay => {
                for c in &mut self.regions {
                    if c.role == Role::Standby && c.up {
                        c.replayed = c.log.len();
                    }
                }
            }
            Op::Cut => self.link = false,
            Op::Heal => self.link = true,
            Op::Stop(i) => self.regions[i].up = false,
            // A cluster starts as what its data directory says: a stopped primary comes back a
            // primary with its old configuration (the operator's mistake the fence must survive).
            Op::Start(i) => self.regions[i].up = true,
            Op::Promote(i) => {
                let other = &self.regions[1 - i];
                let upstream = if !self.link || !other.up {
                    Upstream::Unreachable
                } else if matches!(other.role, Role::Primary { .. }) {
                    Upstream::Primary
                } else {
                    Upstream::Standby
                };
                let c = &self.regions[i];
                if !c.up {
                    return;
                }
                let facts = [ClusterFacts {
                    name: "main".into(),
                    in_recovery: c.role == Role::Standby,
                    received: Some(Lsn(c.log.len() as u64)),
                    replayed: Some(Lsn(c.replayed as u64)),
                    // The model's log holds whole records only: a gap is replay still to do.
                    replay_at_rest: false,
                    upstream,
                }];
                if let Ok(p) = decide(&c.name, c.writer.as_ref(), &facts) {
                    assert!(
                        p.epoch > self.last_epoch,
                        "the epoch grows at every promotion"
                    );
                    self.last_epoch = p.epoch;
                    let name = c.name.clone();
                    let c = &mut self.regions[i];
                    // Promoted: it writes alone until the other region rejoins as its standby.
                    c.role = Role::Primary { sync: false };
                    c.replayed = c.log.len();
                    c.writer = Some(Writer {
                        region: name,
                        epoch: p.epoch,
                    });
                }
            }
            Op::Rejoin(i) => {
                // The old writer rewound onto the new one's timeline and following it; the new
                // writer commits synchronously to it again.
                let w = 1 - i;
                if !self.link
                    || !self.regions[i].up
                    || !self.regions[w].up
                    || !matches!(self.mode(w), Mode::Writer { .. })
                    || !matches!(self.regions[w].role, Role::Primary { .. })
                {
                    return;
                }
                let theirs = self.regions[w]
                    .writer
                    .clone()
                    .expect("a writer records itself");
                if may_follow(self.regions[i].writer.as_ref(), &theirs).is_err() {
                    return;
                }
                let (log, writer) = (self.regions[w].log.clone(), self.regions[w].writer.clone());
                let c = &mut self.regions[i];
                c.role = Role::Standby;
                c.log = log;
                c.replayed = c.log.len();
                c.writer = writer;
                self.regions[w].role = Role::Primary { sync: true };
            }
        }
    }

    /// The two invariants; `Err` names the broken one.
    fn check(&self) -> Result<(), String> {
        let acking: Vec<usize> = (0..2).filter(|&i| self.can_ack(i)).collect();
        if acking.len() > 1 {
            return Err("two regions can acknowledge writes".into());
        }
        for &i in &acking {
            if let Some(lost) = self
                .acked
                .iter()
                .find(|id| !self.regions[i].log.contains(id))
            {
                return Err(format!(
                    "write {lost} was acknowledged and region {} writes without it",
                    self.regions[i].name
                ));
            }
        }
        Ok(())
    }
}

fn run(sync: bool, ops: &[Op]) -> Result<(), String> {
    let mut w = World::new(sync);
    for (n, op) in ops.iter().enumerate() {
        w.apply(*op);
        w.check()
            .map_err(|e| format!("after step {n} ({op:?}): {e}"))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn with_synchronous_commit_across_regions_one_region_acknowledges_and_loses_nothing(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        if let Err(e) = run(true, &ops) {
            prop_assert!(false, "{}", e);
        }
    }
}

#[test]
fn asynchronous_commit_across_regions_loses_what_the_cut_left_unsent() {
    // Written and acknowledged in A, the link cut before it streamed, B promoted: B writes
    // without it. This is the RPO an asynchronous deployment accepts.
    let e = run(false, &[Op::Write(0), Op::Cut, Op::Stop(0), Op::Promote(1)])
        .expect_err("the model finds the loss");
    assert!(
        e.contains("acknowledged and region b writes without it"),
        "{e}"
    );
    // And A, cut off but running, goes on acknowledging beside B: two writers.
    let e = run(false, &[Op::Cut, Op::Promote(1)]).expect_err("the model finds the loss");
    assert!(e.contains("two regions can acknowledge"), "{e}");
    // The same with synchronous commit: the write is not acknowledged (it waits for B), and A
    // acknowledges nothing once B no longer follows it.
    run(true, &[Op::Write(0), Op::Cut, Op::Stop(0), Op::Promote(1)]).expect("nothing broken");
    run(
        true,
        &[
            Op::Cut,
            Op::Promote(1),
            Op::Write(0),
            Op::Heal,
            Op::Write(0),
        ],
    )
    .expect("nothing broken");
}

#[test]
fn a_promotion_is_refused_while_the_old_writer_answers_as_a_primary() {
    let me: RegionName = "b".parse().expect("a region");
    let writer = Writer {
        region: "a".parse().expect("a region"),
        epoch: 3,
    };
    let standby = |upstream| ClusterFacts {
        name: "main".into(),
        in_recovery: true,
        received: Some(Lsn(100)),
        replayed: Some(Lsn(100)),
        replay_at_rest: false,
        upstream,
    };
    assert!(matches!(
        decide(&me, Some(&writer), &[standby(Upstream::Primary)]),
        Err(onsale_domain::region::Refusal::OldWriterAlive { .. })
    ));
    let p = decide(&me, Some(&writer), &[standby(Upstream::Unreachable)]).expect("nothing broken");
    assert_eq!((p.promote, p.epoch), (vec![0], 4));
    // Shards first, the main database (the writer row's cluster) last.
    let shard = ClusterFacts {
        name: "shard 2".into(),
        ..standby(Upstream::Standby)
    };
    let p = decide(
        &me,
        Some(&writer),
        &[standby(Upstream::Unreachable), shard.clone()],
    )
    .expect("nothing broken");
    assert_eq!(p.promote, vec![1, 0]);
    // Not replayed yet, or never streamed: refused.
    let behind = ClusterFacts {
        replayed: Some(Lsn(90)),
        ..shard.clone()
    };
    assert!(matches!(
        decide(
            &me,
            Some(&writer),
            &[standby(Upstream::Unreachable), behind.clone()]
        ),
        Err(onsale_domain::region::Refusal::NotReplayed { .. })
    ));
    // The same gap with both positions at rest: the old writer died mid-record (the drill
    // met it: received 0/7390000, replayed to 0/738FFC0 for good); the promotion goes on.
    let torn = ClusterFacts {
        replay_at_rest: true,
        ..behind
    };
    assert_eq!(
        decide(&me, Some(&writer), &[standby(Upstream::Unreachable), torn])
            .expect("a torn last record holds no acknowledged write")
            .promote,
        vec![1, 0]
    );
    let never = ClusterFacts {
        received: None,
        ..shard
    };
    assert!(decide(&me, Some(&writer), &[standby(Upstream::Unreachable), never]).is_err());
}

#[test]
fn lsns_read_and_print_as_postgresql_writes_them() {
    let l: Lsn = "16/B374D848".parse().expect("nothing broken");
    assert_eq!(l.0, 0x16_B374_D848);
    assert_eq!(l.to_string(), "16/B374D848");
    assert!("16B374D848".parse::<Lsn>().is_err());
    assert!("a".parse::<RegionName>().is_ok());
    assert!("A".parse::<RegionName>().is_err());
    assert!("1a".parse::<RegionName>().is_err());
}
