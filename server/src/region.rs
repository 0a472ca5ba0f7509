//! A process in its region (docs/adr/024): whether it writes or stands by, decided at start
//! from its main database (`onsale_domain::region::mode`) and watched while it runs; the gate
//! a standby puts before its API; and the operator's promotion of a standby region.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::response::{IntoResponse, Response};
use onsale_domain::region::{self, ClusterFacts, Lsn, Mode, RegionName, Upstream, Writer};
use onsale_edge::problem::ApiError;
use onsale_eventlog::region as store;
use onsale_eventlog::DatabaseSettings;
use serde::Serialize;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// The header every answer names the serving region in.
pub const REGION_HEADER: &str = "onsale-region";

/// The main database and each shard, once each, the main database first.
fn clusters(db: &DatabaseSettings) -> Vec<(String, DatabaseSettings)> {
    let mut all = vec![("main".to_owned(), db.clone())];
    if !db.shard_urls.is_empty() {
        for (n, shard) in (1..).zip(db.shards()) {
            if shard.database_url != db.database_url {
                all.push((format!("shard {n}"), shard));
            }
        }
    }
    all
}

/// What `onsale migrate` does, as the schema's owner (issue 53, item 6): the migrations on the
/// main database and every shard, `logins` admitted as the processes' logins (members of the
/// app role and nothing more), and on a deployment's first migration `me` recorded as the
/// writer region on every cluster. A standby region's databases replay the writer's: nothing
/// is done there (`Ok(false)`).
pub async fn migrate(
    db: &DatabaseSettings,
    me: &RegionName,
    logins: &[String],
) -> anyhow::Result<bool> {
    let owner = db.as_owner();
    let main = owner.pool(1, true)?;
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&main)
        .await
        .context("reach the main database")?;
    main.close().await;
    if in_recovery {
        return Ok(false);
    }
    owner.migrate().await?;
    owner.admit_logins(logins).await?;
    for (_, cluster) in clusters(&owner) {
        let pool = cluster.pool(1, true)?;
        let recorded = store::record_first_writer(&pool, me).await;
        pool.close().await;
        recorded?;
    }
    Ok(true)
}

/// Whether this process writes: a standby main database (or one that names another region
/// the writer) makes it a standby, which writes nothing. A process never migrates (its login
/// may not): a writer waits until `onsale migrate` has brought the schema to this build's
/// version and recorded the writer region; a standby until the writer's schema, replicated,
/// has.
pub async fn settle(db: &DatabaseSettings, me: &RegionName) -> anyhow::Result<Mode> {
    let main = db.pool(1, true)?;
    let mut waited = Instant::now();
    let mode = loop {
        let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&main)
            .await
            .context("reach the main database")?;
        let migrated: bool =
            // A schema from before migration 0029 does not let the app role read its version:
            // read as not migrated yet.
            sqlx::query_scalar(
                "SELECT to_regclass('_sqlx_migrations') IS NOT NULL
                        AND has_table_privilege('_sqlx_migrations', 'SELECT')",
            )
                .fetch_one(&main)
                .await?;
        let applied: Option<i64> = if migrated {
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                .fetch_one(&main)
                .await?
        } else {
            None
        };
        let latest = onsale_eventlog::latest_migration();
        let current = applied.is_some_and(|v| v >= latest);
        let recorded = if current {
            store::recorded_writer(&main).await?
        } else {
            None
        };
        let mode = region::mode(me, in_recovery, recorded.as_ref());
        match &mode {
            Mode::Writer { .. } if current && recorded.is_some() => break mode,
            Mode::Standby { .. } if current => break mode,
            // The schema older than this build (not migrated yet, or the writer region not
            // upgraded yet), or no writer recorded: waited for, not guessed at.
            _ => {
                if waited.elapsed() > Duration::from_secs(10) {
                    tracing::warn!(
                        ?applied,
                        latest,
                        ?mode,
                        "waiting for `onsale migrate` (the writer region's) to bring the schema to this build's version"
                    );
                    waited = Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    main.close().await;
    Ok(mode)
}

/// Cancels `changed` once the mode `pool`'s cluster implies for region `me` is no longer
/// `now` (a standby promoted; a writer's cluster turned into a standby of the new writer), so
/// the process starts again as what it is. A database it cannot reach changes nothing.
pub async fn watch(pool: PgPool, me: RegionName, now: Mode, changed: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        if changed.run_until_cancelled(every.tick()).await.is_none() {
            return;
        }
        let Ok(in_recovery) = sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()")
            .fetch_one(&pool)
            .await
        else {
            continue;
        };
        let Ok(writer) = store::recorded_writer(&pool).await else {
            continue;
        };
        let mode = region::mode(&me, in_recovery, writer.as_ref());
        if mode != now {
            tracing::warn!(region = %me, was = ?now, now = ?mode, "the region's role changed: starting again as it is now");
            changed.cancel();
            return;
        }
    }
}

/// Where a standby's process sends writes: to another region, or nowhere it knows (its own
/// region writes, but this process reaches a standby of its database: a misconfigured node
/// or one left on a demoted primary).
#[derive(Debug, Clone)]
pub enum Refer {
    Region(String),
    Nowhere,
}

impl Refer {
    pub fn new(me: &RegionName, writer: Option<&RegionName>) -> Self {
        match writer {
            Some(w) if w != me => Self::Region(w.to_string()),
            _ => Self::Nowhere,
        }
    }
}

/// Before a standby's API: reads pass, every write is refused with 503 and `Retry-After`:
/// `OTHER_REGION` naming the writer region, or `UNAVAILABLE` when the writer is this
/// process's own region (the development sign-in writes nothing and passes).
pub async fn standby_gate(
    axum::extract::State(refer): axum::extract::State<Arc<Refer>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::Method;
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if reads || req.uri().path() == "/v1/dev/token" {
        return next.run(req).await;
    }
    match &*refer {
        Refer::Region(w) => ApiError::other_region(Some(w)),
        Refer::Nowhere => ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            onsale_edge::ErrorCode::Unavailable,
            "this process's database is a read-only standby; retry shortly",
        ),
    }
    .into_response()
}

/// What `onsale region promote` did.
#[derive(Debug, Serialize)]
pub struct Promoted {
    pub region: RegionName,
    pub epoch: i64,
    /// Each cluster and the WAL position it writes from.
    pub clusters: Vec<(String, String)>,
    /// From the command's start to the last cluster's commit.
    pub took_ms: u128,
}

/// How the old writer's cluster answers: a standby's upstream (its `primary_conninfo`) asked
/// directly, two seconds at most.
async fn probe_upstream(owner: &PgPool) -> anyhow::Result<Upstream> {
    let Some(info) = store::upstream(owner).await? else {
        return Ok(Upstream::Unreachable);
    };
    let mut options = sqlx::postgres::PgConnectOptions::new().database("postgres");
    for (k, v) in conninfo(&info) {
        options = match k.as_str() {
            "host" | "hostaddr" => options.host(&v),
            "port" => options.port(v.parse().unwrap_or(5432)),
            "user" => options.username(&v),
            "password" => options.password(&v),
            _ => options,
        };
    }
    let probe = async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(2))
            .connect_with(options)
            .await?;
        let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        anyhow::Ok(in_recovery)
    };
    Ok(
        match tokio::time::timeout(Duration::from_secs(3), probe).await {
            Ok(Ok(true)) => Upstream::Standby,
            Ok(Ok(false)) => Upstream::Primary,
            _ => Upstream::Unreachable,
        },
    )
}

/// libpq's `key=value` pairs (values may be single-quoted with `\` escapes).
fn conninfo(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        if key.is_empty() {
            return out;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == '=') {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace())));
        }
        out.push((key, value));
    }
}

/// `onsale region promote`: makes region `me` (whose databases `db` names) the writer, if
/// `onsale_domain::region::decide` finds it safe: the old writer's clusters do not answer as
/// primaries, and each standby replayed what it received (waited for up to `wait`; a gap that
/// stands still for `region::REPLAY_AT_REST` is a torn last record and does not hold it). Then
/// every shard, and the main database last, is promoted and takes over under the next
/// epoch. Running it again finishes a promotion that stopped part way.
pub async fn promote(
    db: &DatabaseSettings,
    me: &RegionName,
    wait: Duration,
) -> anyhow::Result<Promoted> {
    let started = Instant::now();
    let owner = db.as_owner();
    let pools = clusters(&owner)
        .into_iter()
        .map(|(name, c)| anyhow::Ok((name, c.pool(2, true)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Each cluster's (received, replayed) and since when it has stood still.
    type Still = Option<(Option<Lsn>, Option<Lsn>, Instant)>;
    let mut still: Vec<Still> = vec![None; pools.len()];
    let decision = loop {
        let mut facts = Vec::new();
        for (i, (name, pool)) in pools.iter().enumerate() {
            let s = store::state(pool)
                .await
                .with_context(|| format!("{name} of region {me} does not answer"))?;
            let since = match still[i] {
                Some((received, replayed, since))
                    if received == s.received && replayed == s.replayed =>
                {
                    since
                }
                _ => Instant::now(),
            };
            still[i] = Some((s.received, s.replayed, since));
            facts.push(ClusterFacts {
                name: name.clone(),
                in_recovery: s.in_recovery,
                received: s.received,
                replayed: s.replayed,
                replay_at_rest: since.elapsed() >= region::REPLAY_AT_REST,
                upstream: if s.in_recovery {
                    probe_upstream(pool).await?
                } else {
                    Upstream::Unreachable
                },
            });
        }
        let writer = store::recorded_writer(&pools[0].1).await?;
        match region::decide(me, writer.as_ref(), &facts) {
            Err(region::Refusal::NotReplayed { .. }) if started.elapsed() < wait => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => break other,
        }
    };
    let promotion = decision.map_err(|refused| anyhow::anyhow!("promotion refused: {refused}"))?;
    let writer = Writer {
        region: me.clone(),
        epoch: promotion.epoch,
    };
    // Shards first, the main database (whose writer row the processes follow) last; a cluster
    // promoted by an earlier run that stopped is taken over all the same.
    let mut at: Vec<(String, String)> = Vec::new();
    for (i, (name, pool)) in pools
        .iter()
        .enumerate()
        .skip(1)
        .chain(pools.iter().enumerate().take(1))
    {
        let lsn: Lsn = store::take_over(pool, &writer, i == 0)
            .await
            .with_context(|| format!("take over {name}"))?;
        at.push((name.clone(), lsn.to_string()));
    }
    for (_, pool) in pools {
        pool.close().await;
    }
    Ok(Promoted {
        region: me.clone(),
        epoch: writer.epoch,
        clusters: at,
        took_ms: started.elapsed().as_millis(),
    })
}

/// `onsale region follow-check`: whether this region's clusters (`db`) may be rewound onto
/// the writer at `writer_url` and follow it (`onsale_domain::region::may_follow`): the writer
/// must be a primary recording a later epoch than this region's main database does.
pub async fn follow_check(db: &DatabaseSettings, writer_url: &str) -> anyhow::Result<Writer> {
    let ours = store::recorded_writer(&db.as_owner().pool(1, true)?).await?;
    let theirs_db = DatabaseSettings {
        database_url: writer_url.to_owned(),
        shard_urls: Vec::new(),
        ..db.as_owner()
    };
    let pool = theirs_db.pool(1, true)?;
    let s = store::state(&pool).await.context("reach the writer")?;
    anyhow::ensure!(!s.in_recovery, "{writer_url} is a standby, not the writer");
    let theirs = s.writer.context("the writer records no writer region")?;
    region::may_follow(ours.as_ref(), &theirs)?;
    Ok(theirs)
}

#[cfg(test)]
mod tests {
    use super::conninfo;

    #[test]
    fn a_standbys_conninfo_reads_as_libpq_writes_it() {
        let got = conninfo("user=onsale passfile='/root/.pg pass' host=127.0.0.1 port=54349 sslmode=prefer application_name='b\\'s main'");
        let get = |k: &str| {
            got.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("user"), Some("onsale"));
        assert_eq!(get("passfile"), Some("/root/.pg pass"));
        assert_eq!(get("port"), Some("54349"));
        assert_eq!(get("application_name"), Some("b's main"));
        assert!(conninfo("").is_empty());
    }
}
