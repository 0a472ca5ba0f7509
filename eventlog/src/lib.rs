//! The event log: the truth every other part of onsale derives from. This crate owns the
//! `events` and `snapshots` tables (the schema is postgres-es's, migrations/0001) and every
//! statement on them, behind [`EventLog`]: appends under the version check, loads of snapshot
//! plus tail, replays, and the range reads the relay and the projections fill gaps from.
//!
//! [`PgEventLog`] is the production log; [`MemoryEventLog`] keeps the same contract in memory
//! so the owner's group commit, conflict and failure paths can be unit-tested without a
//! database (integration tests always use PostgreSQL). It decides nothing: the domain decides,
//! the log only keeps what was decided, in order, once.

pub mod catalog;
pub mod chain;
pub mod checkpoint;
mod copy;
mod memory;
pub mod moving;
mod pg;
pub mod region;
pub mod scan;
pub mod shards;

use chrono::{DateTime, Utc};
use onsale_domain::{Show, ShowEvent, ShowId, VenueEvent, VenueId};

pub use catalog::{Catalog, CatalogError, Scheduled};
pub use memory::MemoryEventLog;
pub use pg::{latest_migration, log_row, migrate, Past, PgEventLog, Until, FOLD_YIELD_EVERY};
pub use shards::{Directory, MemoryDirectory, PgDirectory, ShardId, ShardedLog};

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Another writer appended to this aggregate first: reload and retry.
    #[error("version conflict")]
    Conflict,
    /// The log could not be reached or did not answer: fail closed.
    #[error("event store unavailable: {0}")]
    Unavailable(String),
    /// The log holds something this build cannot read.
    #[error("corrupt event log: {0}")]
    Corrupt(String),
    /// The append carried an epoch that is no longer the show's: another node claimed the show
    /// since (this one was paused or cut off). Nothing was written.
    #[error("fenced: another node owns this show now")]
    Fenced,
}

/// A command node as the log knows it: its id (fresh for every process) and where its HTTP API
/// answers, for the commands other nodes forward to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: uuid::Uuid,
    pub addr: String,
}

/// Who decides a show: this node, under an epoch every append carries, or another live node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    Owned {
        epoch: i64,
    },
    Elsewhere(Node),
    /// The cluster records another region as the writer (docs/adr/024): no node of this
    /// region may own a show there.
    OtherRegion(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A show rebuilt from the log, with the sequence of its last event.
#[derive(Debug)]
pub struct LoadedShow {
    pub show: Show,
    pub version: i64,
    pub snapshot_version: i64,
}

/// One event of a show, as stored.
#[derive(Debug, serde::Serialize)]
pub struct StoredEvent {
    pub sequence: i64,
    pub event_type: String,
    pub event: ShowEvent,
}

/// What a show's recent events did ([`EventLog::recent_activity`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activity {
    pub holds: i64,
    pub seats_held: i64,
    pub orders: i64,
}

/// One row of the log as the relay publishes it: any aggregate, payload and metadata as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub sequence: i64,
    pub event_type: String,
    pub event_version: String,
    pub payload: String,
    pub metadata: String,
    /// The row's link in its aggregate's chain (migration 0009, [`chain`]): SHA-256 over the
    /// previous row's and this row's columns. Consumers of the topic check it (issue 53 item 7).
    pub hash: [u8; 32],
}

impl LogRow {
    /// The hash this row has when the row before it in its aggregate has `prev`.
    pub fn chain_from(&self, prev: &[u8]) -> [u8; 32] {
        chain::row_hash(
            prev,
            &self.aggregate_type,
            &self.aggregate_id,
            self.sequence,
            &self.event_type,
            &self.event_version,
            &self.payload,
            &self.metadata,
        )
    }
}

/// The trace (a W3C `traceparent`) under which the events `events` of an append were decided:
/// it goes into their rows' metadata, where the relay finds it (docs/adr/019).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traced {
    pub events: std::ops::Range<usize>,
    pub traceparent: String,
}

/// The metadata of each of `n` appended rows: when they were decided, and the trace each was
/// decided under, if any.
pub(crate) fn row_metadata(at: DateTime<Utc>, n: usize, traces: &[Traced]) -> Vec<String> {
    let at = at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut rows = vec![serde_json::json!({ "at": at }).to_string(); n];
    for t in traces {
        let traced = serde_json::json!({ "at": at, "traceparent": t.traceparent }).to_string();
        for row in rows.iter_mut().take(t.events.end).skip(t.events.start) {
            row.clone_from(&traced);
        }
    }
    rows
}

/// The position after which [`EventLog::scan`] continues: (aggregate type, id, sequence).
pub type ScanKey = (String, String, i64);

/// The event log's contract. Appends are all or nothing and fenced by the version: a sequence
/// another writer already used is [`StoreError::Conflict`], never an overwrite.
#[async_trait::async_trait]
pub trait EventLog: Send + Sync + std::fmt::Debug {
    /// Appends `events` as sequences `after + 1 ..` of `show`. `at`, the time the events were
    /// decided, goes into each row's metadata for auditors.
    /// `epoch` is the one the show was claimed with ([`EventLog::claim`]): if the show was
    /// claimed again since, nothing is written and the answer is [`StoreError::Fenced`].
    /// `traces` name the events decided under a sampled trace.
    async fn append(
        &self,
        show: ShowId,
        epoch: i64,
        after: i64,
        at: DateTime<Utc>,
        events: &[ShowEvent],
        traces: &[Traced],
    ) -> Result<()>;

    /// Claims a show for `node` (registering the node as alive for `ttl`) unless another live
    /// node owns it. A claim always starts a new epoch, so whatever an earlier owner (another
    /// node, or this one before) still tries to append is fenced. Load the show only after it.
    async fn claim(&self, show: ShowId, node: &Node, ttl: std::time::Duration) -> Result<Claim>;

    /// Gives a show up (its owner retired): the next claim, by any node, finds it free.
    async fn release(&self, show: ShowId, epoch: i64) -> Result<()>;

    /// Keeps `node` alive for `ttl` more; answers the shows it still owns (a show another node
    /// claimed while this one was presumed dead is no longer among them).
    async fn heartbeat(&self, node: &Node, ttl: std::time::Duration) -> Result<Vec<ShowId>>;

    /// The node stops: its shows are free at once.
    async fn leave(&self, node: &Node) -> Result<()>;

    /// Shows whose owner is no longer alive (a node died): the live nodes claim them so their
    /// lapsed holds are swept and their next command finds an owner.
    async fn orphans(&self, limit: i64) -> Result<Vec<ShowId>>;

    /// The latest snapshot, then every event after it.
    async fn load(&self, show: ShowId) -> Result<LoadedShow>;

    /// Every event from zero, ignoring snapshots: the reference a snapshot is checked against.
    async fn replay(&self, show: ShowId) -> Result<LoadedShow>;

    /// The show as it stood at `upto`: its newest snapshot taken at or before `upto` (or zero),
    /// then the events after it up to `upto`. What a projection resumes from at its stored
    /// position without reading the show's whole history. A log that ends before `upto` gives
    /// the show at its end (the caller compares the version).
    async fn load_upto(&self, show: ShowId, upto: i64) -> Result<LoadedShow>;

    /// A show's events in order, as stored: what analysts and auditors replay.
    async fn events(&self, show: ShowId) -> Result<Vec<StoredEvent>> {
        let id = show.to_string();
        self.read_range(&id, 0, i64::MAX, i64::MAX)
            .await?
            .into_iter()
            .map(|r| {
                Ok(StoredEvent {
                    sequence: r.sequence,
                    event: serde_json::from_str(&r.payload)
                        .map_err(|e| StoreError::Corrupt(format!("{id}@{}: {e}", r.sequence)))?,
                    event_type: r.event_type,
                })
            })
            .collect()
    }

    /// Events `after + 1 ..= upto` of a show with their metadata (at most `limit`), in order;
    /// a hole in the sequence is [`StoreError::Corrupt`].
    async fn read_range(
        &self,
        show: &str,
        after: i64,
        upto: i64,
        limit: i64,
    ) -> Result<Vec<LogRow>>;

    /// What a show was scheduled with (its first event, which never changes), `None` if the
    /// show does not exist: what the event page and the waiting room read, without an owner.
    async fn scheduled(
        &self,
        show: ShowId,
    ) -> Result<Option<(onsale_domain::ShowInfo, onsale_domain::VenueLayout)>> {
        let id = show.to_string();
        let Some(first) = self.read_range(&id, 0, 1, 1).await?.into_iter().next() else {
            return Ok(None);
        };
        match serde_json::from_str::<ShowEvent>(&first.payload) {
            Ok(ShowEvent::ShowScheduled { info, layout }) => Ok(Some((info, layout))),
            Ok(other) => Err(StoreError::Corrupt(format!(
                "{id}@1 is {}, not ShowScheduled",
                cqrs_es::DomainEvent::event_type(&other)
            ))),
            Err(e) => Err(StoreError::Corrupt(format!("{id}@1: {e}"))),
        }
    }

    /// The show's last `SalePolicyChanged` event, if it has one (a partial index finds it
    /// without reading the show's history).
    async fn last_policy_change(&self, show: &str) -> Result<Option<LogRow>>;

    /// Over a show's last `events` events: the holds made, the seats they held and the orders
    /// placed (what the waiting room sizes admission by).
    async fn recent_activity(&self, show: ShowId, events: i64) -> Result<Activity>;

    /// Every show and the sequence of its last event.
    async fn heads(&self) -> Result<Vec<(String, i64)>>;

    /// Rows of every aggregate (or of one show) after `after`, in key order, at most `limit`:
    /// the relay's backfill.
    async fn scan(&self, after: &ScanKey, show: Option<&str>, limit: i64) -> Result<Vec<LogRow>>;

    /// Stores a snapshot taken at `version` and drops all but the two newest.
    async fn save_snapshot(&self, show: ShowId, version: i64, payload: &str) -> Result<()>;

    /// Records a venue (one event, sequence 1).
    async fn register_venue(&self, venue: VenueId, event: &VenueEvent) -> Result<()>;

    async fn load_venue(&self, venue: VenueId) -> Result<Option<VenueEvent>>;

    /// Whether the log answers: what `/readyz` reports.
    async fn ping(&self) -> Result<()>;
}

/// Where a load starts: the state a snapshot stores (or an empty show) and its sequence.
fn start_from(id: &str, snapshot: Option<(i64, String)>) -> Result<(Show, i64)> {
    match snapshot {
        Some((seq, payload)) => Ok((
            serde_json::from_str::<Show>(&payload)
                .map_err(|e| StoreError::Corrupt(format!("snapshot {id}@{seq}: {e}")))?,
            seq,
        )),
        None => Ok((Show::default(), 0)),
    }
}

/// A show being rebuilt: `start` with the events after it applied one by one, in order, as
/// they are read (the rows are never all held at once); a hole in the sequence is
/// [`StoreError::Corrupt`].
struct Fold<'a> {
    id: &'a str,
    show: Show,
    from: i64,
    version: i64,
}

impl<'a> Fold<'a> {
    fn new(id: &'a str, (show, from): (Show, i64)) -> Self {
        Self {
            id,
            show,
            from,
            version: from,
        }
    }

    fn push(&mut self, seq: i64, payload: &str) -> Result<()> {
        use cqrs_es::Aggregate;
        if seq != self.version + 1 {
            return Err(StoreError::Corrupt(format!(
                "{}: sequence {seq} follows {}",
                self.id, self.version
            )));
        }
        let event: ShowEvent = serde_json::from_str(payload)
            .map_err(|e| StoreError::Corrupt(format!("{}@{seq}: {e}", self.id)))?;
        self.show.apply(event);
        self.version = seq;
        Ok(())
    }

    fn done(self) -> LoadedShow {
        LoadedShow {
            show: self.show,
            version: self.version,
            snapshot_version: self.from,
        }
    }
}

/// The PostgreSQL database of the event store and the read models, as every process reaches it.
/// Printed (`Debug`) with the URLs' passwords redacted.
#[derive(Clone, clap::Args)]
pub struct DatabaseSettings {
    /// PostgreSQL holding the event store and the read models.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://onsale@127.0.0.1:54329/onsale"
    )]
    pub database_url: String,
    /// The write clusters shows are sharded over (docs/adr/021), in order: shard 1, 2, ...
    /// (comma-separated). Each holds the log, ownership and snapshots of the shows placed on
    /// it; `DATABASE_URL` keeps the shard directory and everything else. Unset: one shard,
    /// `DATABASE_URL` itself.
    #[arg(long = "shard-url", env = "ONSALE_SHARD_URLS", value_delimiter = ',')]
    pub shard_urls: Vec<String>,
    /// Connections in each of the process's pools (appends; reads; payments).
    #[arg(long, env = "ONSALE_DB_POOL", default_value_t = 16)]
    pub pool_size: u32,
    /// The role every connection acts as (`SET ROLE` once connected): by default `onsale_app`,
    /// which the migrations create and which may read and append the log but never change
    /// it. Empty: act as the login role (which must then be trusted as much as the owner).
    /// Migrations always run as the login role.
    #[arg(long, env = "ONSALE_DATABASE_ROLE", default_value = APP_ROLE)]
    pub database_role: String,
    /// PostgreSQL ends a session of these pools left idle inside a transaction this long
    /// (seconds; 0: never). onsale never waits inside a transaction, but a statement's future
    /// dropped at the wrong moment (a timeout, an aborted task) can leave its connection in
    /// one (sqlx #4393): its locks would then block others (a logical slot's creation waits for
    /// every open transaction) until it is ended.
    #[arg(long, env = "ONSALE_DB_IDLE_IN_TRANSACTION_SECS", default_value_t = 30)]
    pub idle_in_transaction_secs: u64,
}

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field(
                "database_url",
                &onsale_telemetry::redact_url(&self.database_url),
            )
            .field(
                "shard_urls",
                &self
                    .shard_urls
                    .iter()
                    .map(|u| onsale_telemetry::redact_url(u))
                    .collect::<Vec<_>>(),
            )
            .field("pool_size", &self.pool_size)
            .field("database_role", &self.database_role)
            .field("idle_in_transaction_secs", &self.idle_in_transaction_secs)
            .finish()
    }
}

/// The role the processes act as, created by the migrations (0009).
pub const APP_ROLE: &str = "onsale_app";

impl DatabaseSettings {
    /// A pool of `size` connections, connected lazily; a connection that cannot be had within
    /// 2 s fails the statement (503), it does not queue forever. `ping_before_use` checks each
    /// connection before it is handed out; the appends' pool skips it (a dead connection fails
    /// the statement and the owner answers 503; a ping before every append would cost a round
    /// trip on the hot path).
    pub fn pool(&self, size: u32, ping_before_use: bool) -> anyhow::Result<sqlx::PgPool> {
        use anyhow::Context;
        let options: sqlx::postgres::PgConnectOptions =
            self.database_url.parse().context("parse DATABASE_URL")?;
        let options = options.options([(
            "idle_in_transaction_session_timeout",
            format!("{}s", self.idle_in_transaction_secs),
        )]);
        let role = (!self.database_role.is_empty())
            .then(|| format!("SET ROLE \"{}\"", self.database_role.replace('"', "\"\"")));
        Ok(sqlx::postgres::PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(std::time::Duration::from_secs(2))
            .test_before_acquire(ping_before_use)
            .after_connect(move |conn, _| {
                let role = role.clone();
                Box::pin(async move {
                    if let Some(set) = role {
                        sqlx::Executor::execute(conn, set.as_str()).await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(options))
    }

    /// These settings as the schema's owner (the login role, no `SET ROLE`): for what the
    /// processes' role may not do (moving a show, recording and promoting a writer region).
    pub fn as_owner(&self) -> Self {
        DatabaseSettings {
            database_role: String::new(),
            ..self.clone()
        }
    }

    /// The write clusters, in order (shard 1 first), each as settings of its own: these
    /// settings alone when no shard is listed.
    pub fn shards(&self) -> Vec<DatabaseSettings> {
        if self.shard_urls.is_empty() {
            return vec![self.clone()];
        }
        self.shard_urls
            .iter()
            .map(|url| DatabaseSettings {
                database_url: url.clone(),
                shard_urls: Vec::new(),
                ..self.clone()
            })
            .collect()
    }

    /// Applies the migrations to the main database and every shard listed.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        for db in self.clusters() {
            db.migrate_one().await?;
        }
        Ok(())
    }

    /// Lets each of `logins` log in to every cluster as a process (`serve`, `relay`,
    /// `project`): created if missing (LOGIN, REPLICATION for the relay's slot, nothing else)
    /// and made a member of [`APP_ROLE`]. A login that exists with more (a superuser, one that
    /// creates roles or databases, or one that can act as the schema's owner) is refused, never
    /// altered: its rights are the operator's to take away. Run as the owner, after
    /// [`DatabaseSettings::migrate`] (which creates the app role).
    pub async fn admit_logins(&self, logins: &[String]) -> anyhow::Result<()> {
        for db in self.clusters() {
            let pool = db.owner_connection()?;
            let admitted = admit(&pool, logins).await;
            pool.close().await;
            admitted?;
        }
        Ok(())
    }

    /// The main database and each shard that is not it: each a cluster to migrate.
    fn clusters(&self) -> Vec<DatabaseSettings> {
        let mut all = vec![DatabaseSettings {
            shard_urls: Vec::new(),
            ..self.clone()
        }];
        for shard in self.shards() {
            if shard.database_url != self.database_url {
                all.push(shard);
            }
        }
        all
    }

    /// One connection as the login role, for the owner's statements.
    fn owner_connection(&self) -> anyhow::Result<sqlx::PgPool> {
        use anyhow::Context;
        let options: sqlx::postgres::PgConnectOptions =
            self.database_url.parse().context("parse DATABASE_URL")?;
        Ok(sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_lazy_with(options))
    }

    /// Applies the migrations as the login role (the owner of the schema), on a connection
    /// of their own.
    async fn migrate_one(&self) -> anyhow::Result<()> {
        let pool = self.owner_connection()?;
        let applied = migrate(&pool).await;
        pool.close().await;
        applied
    }
}

/// What a login may do beyond [`APP_ROLE`]'s rights, each a reason it is not a process's
/// login; empty for one that is a member of the app role and nothing more.
pub async fn login_beyond_the_app(pool: &sqlx::PgPool) -> anyhow::Result<Vec<String>> {
    let (name, superuser, create_role, create_db, owner, app): (String, bool, bool, bool, bool, bool) =
        // Asked before the schema exists too (a development stack's owner login migrates it).
        sqlx::query_as(
            "SELECT r.rolname::text, r.rolsuper, r.rolcreaterole, r.rolcreatedb,
                    COALESCE((SELECT pg_has_role(session_user, t.tableowner, 'USAGE')
                                FROM pg_tables t
                               WHERE t.schemaname = 'public' AND t.tablename = 'events'), false),
                    CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)
                         THEN pg_has_role(session_user, $1, 'MEMBER') ELSE false END
               FROM pg_roles r
              WHERE r.rolname = session_user",
        )
        .bind(APP_ROLE)
        .fetch_one(pool)
        .await?;
    let mut beyond = Vec::new();
    for (has, what) in [
        (superuser, "is a superuser"),
        (create_role, "creates roles"),
        (create_db, "creates databases"),
        (owner && !superuser, "can act as the schema's owner"),
        (!app, "is not a member of onsale_app"),
    ] {
        if has {
            beyond.push(format!("the login role {name} {what}"));
        }
    }
    Ok(beyond)
}

async fn admit(pool: &sqlx::PgPool, logins: &[String]) -> anyhow::Result<()> {
    use anyhow::Context;
    for login in logins {
        anyhow::ensure!(
            !login.is_empty() && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "a login role's name is letters, digits and _: {login:?}"
        );
        // Roles are per cluster, and many databases of one cluster may be migrated at once
        // (the tests): a role another created meanwhile is taken as it is.
        sqlx::query(&format!(
            "DO $$
             BEGIN
                 IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN
                     CREATE ROLE \"{login}\" LOGIN REPLICATION INHERIT;
                 END IF;
             EXCEPTION WHEN duplicate_object OR unique_violation THEN
                 NULL;
             END
             $$"
        ))
        .execute(pool)
        .await
        .with_context(|| format!("create the login role {login}"))?;
        let (superuser, create_role, create_db, owner): (bool, bool, bool, bool) = sqlx::query_as(
            "SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb,
                        pg_has_role(r.oid, t.tableowner, 'USAGE')
                   FROM pg_roles r, pg_tables t
                  WHERE r.rolname = $1 AND t.schemaname = 'public' AND t.tablename = 'events'",
        )
        .bind(login)
        .fetch_one(pool)
        .await?;
        anyhow::ensure!(
            !(superuser || create_role || create_db || owner),
            "{login} may do more than a process should (a superuser, creates roles or \
             databases, or acts as the schema's owner): give the processes a login of their own"
        );
        sqlx::query(&format!(
            "DO $$
             BEGIN
                 IF NOT pg_has_role('{login}', '{APP_ROLE}', 'MEMBER') THEN
                     GRANT {APP_ROLE} TO \"{login}\";
                 END IF;
             EXCEPTION WHEN unique_violation OR duplicate_object OR internal_error THEN
                 NULL;
             END
             $$"
        ))
        .execute(pool)
        .await
        .with_context(|| format!("make {login} a member of {APP_ROLE}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_urls_print_without_their_passwords() {
        let db = DatabaseSettings {
            database_url: "postgres://onsale_node:s3cret-pw@db.internal:5432/onsale".into(),
            shard_urls: vec![
                "postgres://a:other-pw@shard1/onsale".into(),
                "not a url".into(),
            ],
            pool_size: 4,
            database_role: APP_ROLE.into(),
            idle_in_transaction_secs: 30,
        };
        let printed = format!("{db:?}");
        for secret in ["s3cret-pw", "other-pw", "not a url"] {
            assert!(!printed.contains(secret), "{printed}");
        }
        assert!(printed.contains("postgres://onsale_node:redacted@db.internal:5432/onsale"));
        assert_eq!(
            onsale_telemetry::redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
    }

    #[test]
    fn only_the_events_decided_under_a_trace_carry_its_traceparent() {
        let at = DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z")
            .expect("a time")
            .with_timezone(&Utc);
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let rows = row_metadata(
            at,
            4,
            &[Traced {
                events: 1..3,
                traceparent: tp.into(),
            }],
        );
        let plain = r#"{"at":"2026-12-03T10:00:00.000000Z"}"#;
        let traced = format!(r#"{{"at":"2026-12-03T10:00:00.000000Z","traceparent":"{tp}"}}"#);
        assert_eq!(rows, [plain, &traced, &traced, plain]);
        assert_eq!(row_metadata(at, 2, &[]), [plain, plain]);
    }
}
