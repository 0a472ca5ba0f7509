//! The card processor as the payment path sees it: the [`Processor`] trait (charge, status,
//! void, refund, the settlement file, webhook verification) and [`ProcessorClient`], which
//! speaks a processor's HTTP API (the local simulator's in the stack and the tests). Every
//! answer is sorted into what it means for the order: a definitive success or failure, or
//! "unknown" (a timeout, an outage, a pending charge), which is never guessed at.

use std::time::Duration;

use onsale_processor_api::signature::{self, SignatureError};
use onsale_processor_api::{
    Charge, ChargeRequest, ChargeStatus, Refund, SettlementLine, WebhookEvent,
};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};

/// How old a webhook delivery may be (seconds) before it is refused as a replay.
pub const WEBHOOK_TOLERANCE_SECS: i64 = 300;

/// Why a webhook delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookRejection {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("not a webhook event: {0}")]
    Body(#[from] serde_json::Error),
}

/// A card processor. Every call is keyed so a retry finds the original; a call that cannot say
/// what happened answers [`Verdict::Unknown`], never a guess.
#[async_trait::async_trait]
pub trait Processor: Send + Sync + std::fmt::Debug {
    /// Charges under the order's key: a retry finds the original charge, never a second one.
    async fn charge(&self, key: &str, request: &ChargeRequest) -> Verdict;
    /// What became of the charge under `key`.
    async fn status(&self, key: &str) -> Verdict;
    /// Voids a charge that has not captured. A captured one answers `Captured`.
    async fn void(&self, key: &str) -> Verdict;
    /// Refunds under `key` (idempotent at the processor).
    async fn refund(
        &self,
        key: &str,
        charge_key: &str,
        amount_cents: i64,
    ) -> anyhow::Result<Refund>;
    /// The settlement file of `day`.
    async fn settlement(&self, day: chrono::NaiveDate) -> anyhow::Result<Vec<SettlementLine>>;
    /// The event a webhook delivery carries, if its signature holds and it is recent (`now` in
    /// Unix seconds).
    fn verify_webhook(
        &self,
        signature: &str,
        body: &[u8],
        now: i64,
    ) -> Result<WebhookEvent, WebhookRejection>;
}

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

/// A processor's HTTP API.
#[derive(Debug, Clone)]
pub struct ProcessorClient {
    http: reqwest::Client,
    base: String,
    /// The current secret, and the previous one during a rollover.
    webhook_secrets: Vec<SecretString>,
}

impl ProcessorClient {
    /// `timeout` bounds every call: past it the answer is `Unknown`. `webhook_secrets` are
    /// what the processor signs its webhooks with: the current one, and the previous one
    /// during a rollover.
    pub fn new(
        base: &str,
        timeout: Duration,
        webhook_secrets: Vec<SecretString>,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder().timeout(timeout).build()?,
            base: base.trim_end_matches('/').to_owned(),
            webhook_secrets,
        })
    }

    /// What a charge's state tells the worker (the status endpoint's answer, read).
    pub fn verdict(charge: &Charge) -> Verdict {
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
}

#[async_trait::async_trait]
impl Processor for ProcessorClient {
    /// Charges under the order's key: a retry finds the original charge, never a second one.
    async fn charge(&self, key: &str, request: &ChargeRequest) -> Verdict {
        let r = self
            .http
            .post(format!("{}/v1/charges", self.base))
            .header("idempotency-key", key)
            .json(request)
            .send()
            .await;
        self.charge_answer(r).await
    }

    async fn status(&self, key: &str) -> Verdict {
        let r = self
            .http
            .get(format!("{}/v1/charges/{key}", self.base))
            .send()
            .await;
        self.charge_answer(r).await
    }

    /// Voids a charge that has not captured. A captured one answers `Captured`.
    async fn void(&self, key: &str) -> Verdict {
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
    async fn refund(
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
    async fn settlement(&self, day: chrono::NaiveDate) -> anyhow::Result<Vec<SettlementLine>> {
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

    fn verify_webhook(
        &self,
        signature: &str,
        body: &[u8],
        now: i64,
    ) -> Result<WebhookEvent, WebhookRejection> {
        let secrets: Vec<&str> = self
            .webhook_secrets
            .iter()
            .map(|s| s.expose_secret())
            .collect();
        signature::verify(&secrets, signature, body, now, WEBHOOK_TOLERANCE_SECS)?;
        Ok(serde_json::from_slice(body)?)
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
