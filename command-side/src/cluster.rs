//! Many command nodes (docs/adr/011). Every `onsale serve` is a node: it registers in the
//! `nodes` table and keeps itself alive there; a show is decided by the node that claimed it
//! (`show_owners`, an epoch that every append carries: the fence). A command for a show another
//! live node owns is forwarded to that node over HTTP (`POST /internal/v1/shows/{id}/work`)
//! and answered with what the owner answered, so a request that reaches the "wrong" node (the
//! router moved the show, or a client bypassed it) is still answered correctly.
//!
//! The route is served on an internal listener of its own (`--internal-listen`), never on the
//! public one. Each request is signed (`x-onsale-node-signature: t=<unix ms>,n=<nonce>,v1=<hex
//! HMAC-SHA256 of method, path, t, nonce and body under the nodes' secret>`), and the
//! signature is checked before the body is parsed: older or newer than [`WINDOW`] is refused,
//! and a nonce seen within the window is refused (a replay, decided atomically). The answer is
//! signed the same way, bound to the request's path and nonce, and the forwarding node takes
//! no answer whose signature does not hold. Only what forwarding carries is
//! accepted: a fan's or admin's command, a payment outcome, a query; never a show's schedule
//! or the sweeper's expiry, which only ever run on the node that decides them.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use onsale_domain::{ShowCommand, ShowId};
use secrecy::ExposeSecret;

use crate::owner::Shows;
use crate::protocol::{
    sign_answer, verify, CommandError, Forwarded, Refused, Returned, SIGNATURE_HEADER, WINDOW,
    WORK_PATH,
};

/// What the route needs: the owners, and the nonces seen within the window.
#[derive(Clone, Debug)]
struct Internal {
    shows: Shows,
    seen: moka::sync::Cache<String, ()>,
}

/// The route other nodes forward commands to. It never forwards again: a node that does not
/// own the show either (it changed hands meanwhile) answers 503 and the first node's caller
/// retries.
pub fn router(shows: Shows) -> Router {
    let seen = moka::sync::Cache::builder()
        .max_capacity(1_000_000)
        .time_to_live(WINDOW * 2)
        .build();
    Router::new()
        .route(WORK_PATH, post(work))
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024))
        .with_state(Internal { shows, seen })
}

fn refused(why: Refused) -> Response {
    metrics::counter!(onsale_telemetry::metrics::FORWARDS_REFUSED_TOTAL).increment(1);
    tracing::warn!(%why, "a forwarded request was refused");
    (StatusCode::UNAUTHORIZED, why.to_string()).into_response()
}

async fn work(
    State(internal): State<Internal>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = WORK_PATH.replace("{id}", &id);
    let header = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let secret = internal.shows.cluster().node_secret.expose_secret();
    let now = chrono::Utc::now().timestamp_millis();
    let nonce = match verify(secret, &path, header, &body, now) {
        Ok(n) => n,
        Err(why) => return refused(why),
    };
    if !first_use(&internal.seen, &nonce) {
        return refused(Refused::Replayed);
    }
    let Ok(show) = id.parse::<ShowId>() else {
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    };
    let Ok(work) = serde_json::from_slice::<Forwarded>(&body) else {
        return StatusCode::UNPROCESSABLE_ENTITY.into_response();
    };
    if !work.forwardable() {
        return (
            StatusCode::FORBIDDEN,
            "only a node's own owner schedules a show or expires its holds",
        )
            .into_response();
    }
    let result: Result<Returned, CommandError> = internal.shows.run_forwarded(show, work).await;
    let Ok(answer) = serde_json::to_vec(&result) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let signature = sign_answer(
        secret,
        &path,
        chrono::Utc::now().timestamp_millis(),
        &nonce,
        &answer,
    );
    (
        [
            (SIGNATURE_HEADER, signature),
            (
                axum::http::header::CONTENT_TYPE.as_str(),
                "application/json".to_owned(),
            ),
        ],
        answer,
    )
        .into_response()
}

/// Whether `nonce` is seen for the first time within the window, decided atomically: two
/// copies of one request arriving together are not both taken.
fn first_use(seen: &moka::sync::Cache<String, ()>, nonce: &str) -> bool {
    use moka::ops::compute::{CompResult, Op};
    // `and_compute_with` runs one computation per key at a time (`or_insert` does not: two
    // copies could both find the key missing and both be told their entry is fresh).
    let result = seen
        .entry(nonce.to_owned())
        .and_compute_with(|seen| match seen {
            Some(_) => Op::Nop,
            None => Op::Put(()),
        });
    matches!(result, CompResult::Inserted(_))
}

impl Forwarded {
    /// What forwarding carries: never a schedule (the node that schedules a show owns it) nor
    /// the sweeper's expiry (run by the owner itself).
    fn forwardable(&self) -> bool {
        !matches!(
            self,
            Self::Command(ShowCommand::Schedule { .. } | ShowCommand::ExpireHolds { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_many_copies_of_one_request_arriving_together_one_is_taken() {
        let seen = moka::sync::Cache::builder().max_capacity(1_000).build();
        for round in 0..200 {
            let nonce = format!("nonce-of-round-{round:04}");
            let taken: usize = std::thread::scope(|s| {
                let copies: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| first_use(&seen, &nonce)))
                    .collect();
                copies
                    .into_iter()
                    .map(|c| usize::from(c.join().expect("joined")))
                    .sum()
            });
            assert_eq!(taken, 1, "round {round}");
        }
    }
}
