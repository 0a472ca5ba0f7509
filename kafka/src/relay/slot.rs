//! The relay's slot and positions: created when missing (with the gap since the last
//! recorded position republished from the table), the last sequence published per aggregate
//! recorded, and the position a synchronous standby has.

use super::*;

/// How many standbys a commit waits for under `synchronous_standby_names` (`ANY 1 (a, b)`,
/// `FIRST 2 (a, b, c)`, `2 (a, b)`, `a, b`), or `None` when it names none.
pub(super) fn quorum_size(names: &str) -> Option<usize> {
    let names = names.trim();
    if names.is_empty() {
        return None;
    }
    let rest = names
        .strip_prefix("ANY ")
        .or_else(|| names.strip_prefix("FIRST "))
        .or_else(|| names.strip_prefix("any "))
        .or_else(|| names.strip_prefix("first "))
        .unwrap_or(names)
        .trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() && rest[digits.len()..].trim_start().starts_with('(') {
        return digits.parse().ok().filter(|k| *k > 0);
    }
    // A plain list waits for its first standby.
    Some(1)
}

/// The replication session of `slot` on the database `pool` reaches: the same address, user,
/// database and TLS mode. The password is PostgreSQL's `PGPASSWORD` (sqlx's options keep theirs
/// to themselves): a deployment that logs in with one sets it (docs/adr/028).
pub(super) fn replication_config(pool: &PgPool, slot: &str, db: &str) -> ReplicationConfig {
    let o = pool.connect_options();
    let password = std::env::var("PGPASSWORD").unwrap_or_default();
    let config = match o.get_socket() {
        Some(dir) => ReplicationConfig::unix(
            dir.to_string_lossy(),
            o.get_port(),
            o.get_username(),
            password,
            db,
            slot,
            PUBLICATION,
        ),
        None => ReplicationConfig::new(
            o.get_host(),
            o.get_username(),
            password,
            db,
            slot,
            PUBLICATION,
        )
        .with_port(o.get_port())
        .with_tls(match o.get_ssl_mode() {
            PgSslMode::Disable | PgSslMode::Allow | PgSslMode::Prefer => TlsConfig::disabled(),
            PgSslMode::Require => TlsConfig::require(),
            PgSslMode::VerifyCa => TlsConfig::verify_ca(None),
            PgSslMode::VerifyFull => TlsConfig::verify_full(None),
        }),
    };
    config
        .with_status_interval(STATUS_EVERY)
        .with_application_name(format!("onsale-relay {slot}"))
}

impl Relay {
    /// Creates the slot when it is missing (the first start, or a primary promoted since) and
    /// fills the gap: every event after the recorded positions is republished from the table.
    /// The marker is written before the slot, so a gap is filled even if the relay dies in
    /// between or halfway through. Returns how many events the gap fill published.
    pub async fn ensure_slot(&self) -> anyhow::Result<usize> {
        let published: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)")
                .bind(PUBLICATION)
                .fetch_one(&self.pool)
                .await?;
        anyhow::ensure!(
            published,
            "the publication {PUBLICATION} is missing: run the migrations (`onsale migrate`)"
        );
        let plugin: Option<String> = sqlx::query_scalar(
            "SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&self.config.slot)
        .fetch_optional(&self.pool)
        .await?;
        if plugin.as_deref() != Some("pgoutput") {
            sqlx::query("INSERT INTO relay_gaps (slot) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(&self.config.slot)
                .execute(&self.pool)
                .await
                .context("mark the gap")?;
            if let Some(plugin) = plugin {
                // An earlier relay's slot (wal2json): what it had published is in the
                // positions, and the gap fill below republishes everything after them.
                sqlx::query("SELECT pg_drop_replication_slot($1)")
                    .bind(&self.config.slot)
                    .execute(&self.pool)
                    .await
                    .with_context(|| format!("drop the {plugin} slot of an earlier relay"))?;
                tracing::warn!(slot = %self.config.slot, %plugin, "an earlier relay's slot dropped");
            }
            // Every transaction committing after the slot's consistent point is decoded from
            // it; every one before is in the table when the gap fill reads it below.
            sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
                .bind(&self.config.slot)
                .execute(&self.pool)
                .await
                .context("create the replication slot")?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_SLOTS_CREATED_TOTAL).increment(1);
            tracing::warn!(slot = %self.config.slot, "replication slot created (first start or a promoted primary)");
        }
        let open: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM relay_gaps WHERE slot = $1)")
                .bind(&self.config.slot)
                .fetch_one(&self.pool)
                .await?;
        if !open {
            return Ok(0);
        }
        let published = self.fill_gap().await?;
        sqlx::query("DELETE FROM relay_gaps WHERE slot = $1")
            .bind(&self.config.slot)
            .execute(&self.pool)
            .await
            .context("close the gap")?;
        tracing::warn!(slot = %self.config.slot, published, "gap filled from the events table");
        Ok(published)
    }

    /// Republishes (as `op: "r"`) every event past this slot's recorded positions, in order per
    /// aggregate, recording positions as it goes. The log reads past the positions as they were
    /// when the fill began: the scan only moves forward, so what it records meanwhile is behind it.
    pub(super) async fn fill_gap(&self) -> anyhow::Result<usize> {
        let marks: Vec<Mark> = sqlx::query_as(
            "SELECT aggregate_type, aggregate_id, sequence FROM relay_positions WHERE slot = $1",
        )
        .bind(&self.config.slot)
        .fetch_all(&self.pool)
        .await
        .context("read the positions")?;
        let mut past = PastMarks::open(&self.pool, &marks)
            .await
            .context("mark the positions")?;
        let mut total = 0;
        loop {
            let rows = past.next(5_000).await.context("read the gap")?;
            let published = self.republish(rows).await?;
            if published.is_empty() {
                return Ok(total);
            }
            let n = published.len();
            total += n;
            let mut last: HashMap<(String, String), i64> = HashMap::new();
            for (t, id, seq) in published {
                let e = last.entry((t, id)).or_insert(seq);
                *e = (*e).max(seq);
            }
            self.record_positions(last).await?;
            metrics::counter!(onsale_telemetry::metrics::RELAY_GAP_EVENTS_TOTAL)
                .increment(n as u64);
        }
    }

    /// Publishes rows of the events table as `op: "r"` (read from the table, not decoded from
    /// the slot), waits for every acknowledgement, and returns their keys in order.
    pub(super) async fn republish(&self, rows: Vec<LogRow>) -> anyhow::Result<Vec<ScanKey>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&self.pool)
            .await?;
        let now = chrono::Utc::now().timestamp_millis();
        let mut keys = Vec::with_capacity(rows.len());
        let mut pending = Vec::with_capacity(rows.len());
        for r in rows {
            keys.push((r.aggregate_type.clone(), r.aggregate_id.clone(), r.sequence));
            let row = RawEventRow::try_from(r)?;
            pending.push(self.publish(RawEnvelope {
                op: "r",
                before: None,
                after: row,
                source: self.source(lsn.clone(), lsn.clone(), None, now, true),
                ts_ms: now,
            }));
        }
        try_join_all(pending).await?;
        Ok(keys)
    }

    /// Records, after Kafka acknowledged them, the last published sequence of each aggregate.
    /// Positions may trail the topic (the stream records them once a second): a gap fill
    /// then republishes more, never less.
    pub(super) async fn record_positions(
        &self,
        last: HashMap<(String, String), i64>,
    ) -> anyhow::Result<()> {
        if last.is_empty() {
            return Ok(());
        }
        let (mut types, mut ids, mut seqs) = (Vec::new(), Vec::new(), Vec::new());
        for ((t, id), seq) in last {
            types.push(t);
            ids.push(id);
            seqs.push(seq);
        }
        sqlx::query(
            "INSERT INTO relay_positions (slot, aggregate_type, aggregate_id, sequence)
             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[])
             ON CONFLICT (slot, aggregate_type, aggregate_id)
             DO UPDATE SET sequence = GREATEST(relay_positions.sequence, EXCLUDED.sequence)",
        )
        .bind(&self.config.slot)
        .bind(&types)
        .bind(&ids)
        .bind(&seqs)
        .execute(&self.pool)
        .await
        .context("record the relay's positions")?;
        Ok(())
    }

    /// The newest WAL position as durable as an acknowledged commit: on a primary with
    /// synchronous standbys, the one the quorum (`ANY k` or `FIRST k`) has flushed; with no
    /// synchronous replication configured, the primary's own flush. `None` while no standby of
    /// a synchronous primary is connected: nothing may be published then.
    pub(super) async fn durable_lsn(&self) -> anyhow::Result<Option<u64>> {
        // One round trip: the setting, the primary's flush and the synchronous standbys'.
        let (names, own, standbys): (String, String, Vec<String>) = sqlx::query_as(
            "SELECT current_setting('synchronous_standby_names'),
                    pg_current_wal_flush_lsn()::text,
                    ARRAY(SELECT flush_lsn::text FROM pg_stat_replication
                           WHERE sync_state IN ('sync', 'quorum') AND flush_lsn IS NOT NULL
                           ORDER BY flush_lsn DESC)",
        )
        .fetch_one(&self.pool)
        .await
        .context("read the durable LSN")?;
        let lsn = match quorum_size(&names) {
            None => Some(own),
            Some(k) => standbys.into_iter().nth(k - 1),
        };
        lsn.map(|l| parse_lsn(&l).context("the durable LSN"))
            .transpose()
    }
}
