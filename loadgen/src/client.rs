//! A typed client of onsale's REST API for the load generator's fans, on the server's own
//! request and answer documents (the ones its OpenAPI document is made from): what a fan sends
//! is built as the server reads it, and what comes back is read as the server wrote it.
//!
//! Like a real client it retries a `503` (not committed: try again with the same
//! Idempotency-Key) for about 40 s, a primary's failover being 20-25 s.

use std::time::{Duration, Instant};

use onsale_command::api::{HoldRequest, HoldResponse, OrderAccepted, OrderRequest};
use onsale_edge::Problem;
use onsale_query::rest::OrderResponse;
use onsale_query::snapshots::SeatMap;
use onsale_waiting_room::api::{
    Challenge, EnterRequest, Entry, HeartbeatRequest, JoinRequest, Joined, Standing,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a request came back with: the document the route answers on success, or the status
/// and the problem it answered instead (`None`: no problem document, or none at all after the
/// retries).
#[derive(Debug)]
pub(crate) enum Reply<T> {
    Done(T),
    Refused(u16, Option<Box<Problem>>),
}

impl<T> Reply<T> {
    /// The status a refusal came with (`None`: done).
    pub(crate) fn refused(&self) -> Option<u16> {
        match self {
            Reply::Done(_) => None,
            Reply::Refused(status, _) => Some(*status),
        }
    }
}

impl<T> std::fmt::Display for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Done(_) => write!(f, "done"),
            Reply::Refused(status, Some(p)) => write!(f, "{status} {}: {}", p.code, p.detail),
            Reply::Refused(status, None) => write!(f, "{status}"),
        }
    }
}

/// The API at `base`, over one connection pool.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    pub(crate) fn new(http: reqwest::Client, base: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// A fan signed in with `token`.
    pub(crate) fn fan(&self, token: String) -> Fan {
        Fan {
            api: self.clone(),
            token,
        }
    }

    /// The show's seat map (counts per section), as anyone reads it.
    pub(crate) async fn seat_map(&self, event: &str) -> anyhow::Result<SeatMap> {
        let url = format!("{}/v1/events/{event}/seats", self.base);
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

/// One fan's calls, under the fan's token.
#[derive(Debug, Clone)]
pub(crate) struct Fan {
    api: Api,
    token: String,
}

/// Headers a fan's command may carry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct With<'a> {
    pub(crate) key: Option<&'a str>,
    pub(crate) session: Option<&'a str>,
}

impl Fan {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api.base)
    }

    /// POSTs `body` and reads the answer as `T` when it comes with `expected`; a 503 is
    /// retried (with the same key) for about 40 s.
    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        expected: u16,
        with: With<'_>,
    ) -> Reply<T> {
        let url = self.url(path);
        for attempt in 0..50u64 {
            let mut request = self.api.http.post(&url).bearer_auth(&self.token).json(body);
            if let Some(k) = with.key {
                request = request.header("Idempotency-Key", k);
            }
            if let Some(s) = with.session {
                request = request.header("X-Onsale-Session", s);
            }
            match request.send().await {
                Ok(res) if res.status().as_u16() == 503 => {}
                Ok(res) => return read(res, expected).await,
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis((50 * (attempt + 1)).min(1_000))).await;
        }
        Reply::Refused(503, None)
    }

    /// Joins the show's line, with a solved challenge when the show asks one.
    pub(crate) async fn join(&self, event: &str, request: &JoinRequest) -> Reply<Joined> {
        let path = format!("/v1/events/{event}/waiting-room");
        self.post(&path, request, 201, With::default()).await
    }

    /// A GET of `path` under the fan's token.
    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.api.http.get(self.url(path)).bearer_auth(&self.token)
    }

    /// A join challenge for this fan.
    pub(crate) async fn challenge(&self, event: &str) -> anyhow::Result<Challenge> {
        let res = self
            .get(&format!("/v1/events/{event}/waiting-room/challenge"))
            .send()
            .await?;
        Ok(res.error_for_status()?.json().await?)
    }

    /// Where the fan stands in the line (`None`: no readable answer).
    pub(crate) async fn standing(&self, event: &str, queue_token: &str) -> Option<Standing> {
        let res = self
            .get(&format!("/v1/events/{event}/waiting-room"))
            .header("X-Onsale-Queue-Token", queue_token)
            .send()
            .await
            .ok()?;
        res.json().await.ok()
    }

    /// Polls the fan's standing every `every` until the line hands out an admission token. A
    /// browser's poll: a dropped connection (the node it reached died) is polled again, as
    /// long as the line answers again within 30 s.
    pub(crate) async fn admission_token(
        &self,
        event: &str,
        queue_token: &str,
        every: Duration,
    ) -> Option<String> {
        let mut failing_since: Option<Instant> = None;
        loop {
            match self.standing(event, queue_token).await {
                Some(standing) => {
                    failing_since = None;
                    if let Some(token) = standing.admission_token {
                        return Some(token);
                    }
                }
                None if failing_since.is_some_and(|t| t.elapsed() > Duration::from_secs(30)) => {
                    return None;
                }
                None => {
                    failing_since.get_or_insert_with(Instant::now);
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Enters the sale with the admission token (429: the sale is full for now).
    pub(crate) async fn enter(&self, event: &str, admission_token: &str) -> Reply<Entry> {
        let request = EnterRequest {
            admission_token: admission_token.to_owned(),
        };
        let path = format!("/v1/events/{event}/enter");
        self.post(&path, &request, 200, With::default()).await
    }

    /// Leaves the sale: the next fan gets the slot now.
    pub(crate) async fn leave(&self, event: &str, session: &str) -> Reply<()> {
        let request = HeartbeatRequest {
            session_id: session.to_owned(),
        };
        let path = format!("/v1/events/{event}/leave");
        match self
            .post::<_, serde_json::Value>(&path, &request, 204, With::default())
            .await
        {
            Reply::Done(_) => Reply::Done(()),
            Reply::Refused(status, problem) => Reply::Refused(status, problem),
        }
    }

    pub(crate) async fn hold(
        &self,
        event: &str,
        request: &HoldRequest,
        with: With<'_>,
    ) -> Reply<HoldResponse> {
        let path = format!("/v1/events/{event}/holds");
        self.post(&path, request, 201, with).await
    }

    pub(crate) async fn order(
        &self,
        request: &OrderRequest,
        with: With<'_>,
    ) -> Reply<OrderAccepted> {
        self.post("/v1/orders", request, 202, with).await
    }

    /// Releases a hold; whether it was released.
    pub(crate) async fn release(&self, hold_id: &str) -> bool {
        let url = self.url(&format!("/v1/holds/{hold_id}"));
        let res = self
            .api
            .http
            .delete(url)
            .bearer_auth(&self.token)
            .send()
            .await;
        res.is_ok_and(|r| r.status().as_u16() == 204)
    }

    /// The fan's order as the orders projection has it (`None`: not there, or not readable).
    pub(crate) async fn order_view(&self, order_id: &str) -> anyhow::Result<Option<OrderResponse>> {
        let res = self.get(&format!("/v1/orders/{order_id}")).send().await?;
        if res.status().as_u16() != 200 {
            return Ok(None);
        }
        Ok(Some(res.json().await?))
    }
}

/// Reads an answer: `T` with the expected status (an empty body reads as JSON `null`), the
/// problem otherwise.
async fn read<T: DeserializeOwned>(res: reqwest::Response, expected: u16) -> Reply<T> {
    let status = res.status().as_u16();
    let bytes = res.bytes().await.unwrap_or_default();
    if status == expected {
        let body = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        return match serde_json::from_slice(body) {
            Ok(doc) => Reply::Done(doc),
            Err(_) => Reply::Refused(status, None),
        };
    }
    Reply::Refused(status, serde_json::from_slice(&bytes).ok())
}
