//! The processor's HTTP API as the worker sees it. Every answer is sorted into what it means
//! for the order: a definitive success or failure, or "unknown" (a timeout, an outage, a
//! pending charge), which is never guessed at.

use std::time::Duration;

use onsale_processor_sim::{Charge, ChargeRequest, ChargeStatus, Refund, SettlementLine};
use reqwest::StatusCode;

/// What a processor call says about a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Captured {
        charge_id: String,
    },
    Declined {
        reason: String,
    },
    /// Voided before it captured: it never will.
    Voided,
    /// Not known yet: ask again (same key), or ask the status endpoint.
    Unknown {
        why: String,
    },
    /// The processor has no charge under this key: the first attempt never reached it.
    NoCharge,
}

#[derive(Debug, Clone)]
pub struct ProcessorClient {
    http: reqwest::Client,
    base: String,
}

impl ProcessorClient {
    /// `timeout` bounds every call: past it the answer is `Unknown`.
    pub fn new(base: &str, timeout: Duration) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder().timeout(timeout).build()?,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    fn verdict(charge: &Charge) -> Verdict {
        match charge.status {
            ChargeStatus::Succeeded | ChargeStatus::Refunded => Verdict::Captured {
                charge_id: charge.charge_id.clone(),
            },
            // A late-settling charge reports failed; settlement reconciliation finds the truth.
            ChargeStatus::Failed => Verdict::Declined {
                reason: "card declined".into(),
            },
            ChargeStatus::Voided => Verdict::Voided,
            ChargeStatus::Pending => Verdict::Unknown {
                why: "the charge is pending at the processor".into(),
            },
        }
    }

    async fn charge_answer(&self, r: reqwest::Result<reqwest::Response>) -> Verdict {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                return Verdict::Unknown {
                    why: format!("no answer: {e}"),
                }
            }
        };
        let status = r.status();
        if status == StatusCode::NOT_FOUND {
            return Verdict::NoCharge;
        }
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Verdict::Unknown {
                why: format!("processor answered {status}"),
            };
        }
        match r.json::<Charge>().await {
            Ok(c) => Self::verdict(&c),
            Err(e) => Verdict::Unknown {
                why: format!("unreadable answer ({status}): {e}"),
            },
        }
    }

    /// Charges under the order's key: a retry finds the original charge, never a second one.
    pub async fn charge(&self, key: &str, request: &ChargeRequest) -> Verdict {
        let r = self
            .http
            .post(format!("{}/v1/charges", self.base))
            .header("idempotency-key", key)
            .json(request)
            .send()
            .await;
        self.charge_answer(r).await
    }

    pub async fn status(&self, key: &str) -> Verdict {
        let r = self
            .http
            .get(format!("{}/v1/charges/{key}", self.base))
            .send()
            .await;
        self.charge_answer(r).await
    }

    /// Voids a charge that has not captured. A captured one answers `Captured`.
    pub async fn void(&self, key: &str) -> Verdict {
        let r = self
            .http
            .post(format!("{}/v1/charges/{key}/void", self.base))
            .send()
            .await;
        match r {
            Ok(r) if r.status() == StatusCode::CONFLICT => {
                // already_captured: the money moved; ask for the charge to name it.
                self.status(key).await
            }
            other => self.charge_answer(other).await,
        }
    }

    /// Refunds under `key` (idempotent at the processor).
    pub async fn refund(
        &self,
        key: &str,
        charge_key: &str,
        amount_cents: i64,
    ) -> anyhow::Result<Refund> {
        let r = self
            .http
            .post(format!("{}/v1/refunds", self.base))
            .header("idempotency-key", key)
            .json(&serde_json::json!({"chargeKey": charge_key, "amountCents": amount_cents}))
            .send()
            .await?;
        let status = r.status();
        if !status.is_success() {
            anyhow::bail!(
                "refund refused ({status}): {}",
                r.text().await.unwrap_or_default()
            );
        }
        Ok(r.json().await?)
    }

    /// The settlement file of `day`.
    pub async fn settlement(&self, day: chrono::NaiveDate) -> anyhow::Result<Vec<SettlementLine>> {
        let r = self
            .http
            .get(format!("{}/v1/settlements/{day}", self.base))
            .send()
            .await?;
        let status = r.status();
        if !status.is_success() {
            anyhow::bail!("settlement file refused ({status})");
        }
        parse_settlement(&r.text().await?)
    }
}

/// Parses a settlement file (CSV with a header line).
pub fn parse_settlement(csv: &str) -> anyhow::Result<Vec<SettlementLine>> {
    let mut lines = csv.lines();
    let header = lines.next().unwrap_or_default();
    anyhow::ensure!(
        header == "kind,key,charge_key,reference,amount_cents,settled_at",
        "unexpected settlement header {header:?}"
    );
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            anyhow::ensure!(f.len() == 6, "settlement line {l:?} has {} fields", f.len());
            Ok(SettlementLine {
                kind: f[0].to_owned(),
                key: f[1].to_owned(),
                charge_key: f[2].to_owned(),
                reference: f[3].to_owned(),
                amount_cents: f[4].parse()?,
                settled_at: f[5].parse()?,
            })
        })
        .collect()
}
