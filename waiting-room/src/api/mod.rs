//! The waiting room's routes (docs/api.md, "Waiting room"): join, the fan's view (JSON or SSE),
//! enter, heartbeat.

use onsale_edge::ErrorCode;
use std::convert::Infallible;

use futures::StreamExt;
use std::time::Duration;

use axum::extract::{FromRef, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, TimeZone, Utc};
use onsale_domain::ShowId;
use onsale_edge::auth::Verifier;
use onsale_edge::auth::{Caller, Role};
use onsale_edge::limits::{ClientAddress, StreamSlots};
use onsale_edge::ApiError;
use onsale_edge::ApiJson;
use rand::Rng;
use serde::{Deserialize, Serialize};

use utoipa::{OpenApi, ToSchema};

use crate::challenge::{self, ChallengeClaims};
use crate::sale::Availability;
use crate::store::Entered;
use crate::tokens::{self, AdmissionClaims, QueueClaims, SessionClaims};
use crate::{eta, now_ms, WaitingRoom};

mod line;
mod wire;

use line::{admit_joiner, join_line, own_session, session, status, verified_if_asked};
pub use wire::{
    Challenge, Closing, EnterRequest, Entry, HeartbeatRequest, JoinRequest, JoinStatus, Joined,
    LineMode, LineStatus, Standing,
};

#[derive(Clone)]
pub struct RoomState {
    pub room: WaitingRoom,
    pub verifier: Verifier,
    streams: StreamSlots,
    availability: moka::future::Cache<ShowId, Availability>,
}

impl std::fmt::Debug for RoomState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RoomState")
    }
}

impl FromRef<RoomState> for Verifier {
    fn from_ref(s: &RoomState) -> Self {
        s.verifier.clone()
    }
}

pub fn router(room: WaitingRoom, verifier: Verifier, streams: StreamSlots) -> Router {
    let availability = moka::future::Cache::builder()
        .time_to_live(Duration::from_secs(1))
        .max_capacity(10_000)
        .build();
    Router::new()
        .route("/v1/events/{id}/waiting-room", post(join).get(view))
        .route("/v1/events/{id}/waiting-room/challenge", get(challenge))
        .route("/v1/events/{id}/enter", post(enter))
        .route("/v1/events/{id}/heartbeat", post(heartbeat))
        .route("/v1/events/{id}/leave", post(leave))
        .with_state(RoomState {
            room,
            verifier,
            streams,
            availability,
        })
}

#[derive(OpenApi)]
#[openapi(
    paths(join, challenge, view, enter, heartbeat, leave),
    components(schemas(
        Joined,
        JoinStatus,
        JoinRequest,
        Challenge,
        EnterRequest,
        Entry,
        HeartbeatRequest,
        Standing,
        LineStatus,
        LineMode,
        Availability,
        Closing
    ))
)]
#[derive(Debug)]
pub struct WaitingRoomDoc;

fn err(status: StatusCode, code: ErrorCode, detail: &str) -> ApiError {
    ApiError::new(status, code, detail)
}

fn redis_down(e: &redis::RedisError) {
    metrics::counter!(onsale_telemetry::metrics::WAITING_ROOM_REDIS_ERRORS_TOTAL).increment(1);
    tracing::warn!(error = %e, "redis unreachable: the waiting room runs in fallback");
}

/// Redis away where nothing can stand in for it: 503, and the caller keeps what it has.
fn store_unavailable(e: &redis::RedisError, detail: &str) -> ApiError {
    redis_down(e);
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::WaitingRoomUnavailable,
        detail,
    )
}

const ADMISSION_KEPT: &str =
    "the waiting room's store is unreachable; your admission stays good, retry shortly";

async fn show_with_room(
    state: &RoomState,
    id: &str,
) -> Result<(ShowId, crate::ShowFacts), ApiError> {
    let show: ShowId = id.parse()?;
    let facts = state.room.facts(show).await?;
    if !facts.waiting_room {
        return Err(err(
            StatusCode::NOT_FOUND,
            ErrorCode::NoWaitingRoom,
            "this event sells without a waiting room",
        ));
    }
    if Utc::now() >= facts.starts_at {
        return Err(err(
            StatusCode::CONFLICT,
            ErrorCode::SaleClosed,
            "the show has started",
        ));
    }
    Ok((show, facts))
}

fn ms_to_time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
}

/// A join challenge for the caller (when the show asks one: `joinChallengeBits` of its policy).
/// Each is for this account and show only, good for 10 minutes and for one join.
#[utoipa::path(get, path = "/v1/events/{id}/waiting-room/challenge", params(("id" = String, Path)),
    security(("bearer" = [])), responses((status = 200, body = Challenge),
        (status = 403, description = "VERIFIED_ACCOUNT_REQUIRED: the event's line is for verified accounts"),
        (status = 404, description = "No such event, no waiting room, or the event asks no challenge (NO_CHALLENGE)")))]
async fn challenge(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let (show, _) = show_with_room(&state, &id).await?;
    let rules = state.room.rules(show).await?;
    // No work for a fan the line would turn away anyway.
    verified_if_asked(&rules, &caller)?;
    let bits = rules.challenge_bits;
    if bits == 0 {
        return Err(err(
            StatusCode::NOT_FOUND,
            ErrorCode::NoChallenge,
            "this event's waiting room asks no challenge: join directly",
        ));
    }
    let claims = ChallengeClaims::new(
        caller.account.as_str(),
        &show.to_string(),
        bits,
        Utc::now().timestamp(),
    );
    let expires_at = Utc
        .timestamp_opt(claims.exp, 0)
        .single()
        .unwrap_or_else(Utc::now);
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(Challenge {
            challenge: state.room.signer.sign(&claims),
            bits,
            expires_at,
        }),
    )
        .into_response())
}

/// Join the line: one position per account (joining again answers the same one). When the
/// event asks it, only verified accounts may join, and each join carries a solved challenge.
#[utoipa::path(post, path = "/v1/events/{id}/waiting-room", params(("id" = String, Path)),
    request_body(content = Option<JoinRequest>, description = "A solved challenge, when the event asks one (`joinChallengeBits` > 0); no body or `{}` otherwise"),
    security(("bearer" = [])), responses((status = 201, body = Joined),
        (status = 403, description = "VERIFIED_ACCOUNT_REQUIRED (the event admits verified accounts only; the token's `verified` claim), CHALLENGE_INVALID or CHALLENGE_NOT_SOLVED"),
        (status = 404), (status = 409, description = "SALE_CLOSED, or CHALLENGE_REUSED"),
        (status = 428, description = "CHALLENGE_REQUIRED: solve a challenge first")))]
async fn join(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    caller.require(&[Role::Fan, Role::Admin])?;
    let (show, facts) = show_with_room(&state, &id).await?;
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        JoinRequest::default()
    } else {
        serde_json::from_slice::<JoinRequest>(&body).map_err(|e| {
            err(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidRequest,
                &format!("the body is not {{challenge, solution}}: {e}"),
            )
        })?
    };
    let answer = match (request.challenge, request.solution) {
        (Some(c), Some(s)) => Some((c, s)),
        (None, None) => None,
        _ => {
            return Err(err(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidRequest,
                "send a challenge with its solution, or neither",
            ))
        }
    };
    admit_joiner(&state, &caller, show, answer).await?;
    let account = caller.account.to_string();
    let queue_token = state.room.signer.sign(&QueueClaims {
        aud: tokens::QUEUE.into(),
        sub: account.clone(),
        show: show.to_string(),
        iat: Utc::now().timestamp(),
        exp: facts.starts_at.timestamp(),
    });
    let joined = join_line(&state, show, &account, facts).await;
    let (position, eta, status) = match joined {
        Ok((pos, eta)) => (
            pos,
            eta,
            if pos.is_some() {
                JoinStatus::Waiting
            } else {
                JoinStatus::PreQueue
            },
        ),
        Err(e) => {
            redis_down(&e);
            (None, None, JoinStatus::Fallback)
        }
    };
    metrics::counter!(onsale_telemetry::metrics::WAITING_ROOM_JOINS_TOTAL).increment(1);
    Ok((
        StatusCode::CREATED,
        Json(Joined {
            position,
            queue_token,
            eta,
            status,
        }),
    )
        .into_response())
}

/// Where the caller stands (the queue token in `X-Onsale-Queue-Token`); `Accept:
/// text/event-stream` streams it every second until admitted.
#[utoipa::path(get, path = "/v1/events/{id}/waiting-room", params(("id" = String, Path),
    ("X-Onsale-Queue-Token" = String, Header)), security(("bearer" = [])),
    responses((status = 200, body = Standing, description = "Where the caller stands; with `Accept: text/event-stream`, a `status` event every second and a last `admitted` event (ADMITTED or EXPIRED), or `closing` (Closing) when the server shuts down. availability: SEATS_MAY_RETURN means none now, but holds or payments may free some (the line is held back until they do); SOLD_OUT holds it back too"), (status = 403)))]
async fn view(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
    address: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // The header first: a request without it is refused whatever the show.
    let token = headers
        .get("x-onsale-queue-token")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            err(
                StatusCode::FORBIDDEN,
                ErrorCode::InvalidQueueToken,
                "the queue token is missing, not yours or not valid",
            )
        })?;
    let (show, _) = show_with_room(&state, &id).await?;
    let account = caller.account.to_string();
    state
        .room
        .signer
        .verify::<QueueClaims>(token, tokens::QUEUE, &account, &show.to_string())
        .map_err(|_| {
            err(
                StatusCode::FORBIDDEN,
                ErrorCode::InvalidQueueToken,
                "the queue token is missing, not yours or not valid",
            )
        })?;
    let sse = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if !sse {
        return Ok(Json(status(&state, show, &account).await?).into_response());
    }
    let slot = state.streams.open(
        address.map(|Extension(ClientAddress(ip))| ip),
        Some(&account),
    )?;
    let stream = futures::stream::unfold(
        (state, show, account, false),
        |(state, show, account, done)| async move {
            if done {
                return None;
            }
            if state.room.shutdown.is_cancelled() {
                // This process is going away: reconnect (the place in line is kept in Redis).
                let event = Event::default()
                    .event("closing")
                    .retry(Duration::from_secs(1))
                    .json_data(Closing {
                        reason: "the server is shutting down; reconnect",
                    })
                    .unwrap_or_default();
                return Some((Ok(event), (state, show, account, true)));
            }
            let v = match status(&state, show, &account).await {
                Ok(v) => v,
                Err(e) => Standing {
                    code: Some(e.code),
                    ..Standing::new(LineStatus::Error, Availability::Unknown)
                },
            };
            let admitted = matches!(v.status, LineStatus::Admitted | LineStatus::Expired);
            let event = Event::default()
                .event(if admitted { "admitted" } else { "status" })
                .json_data(&v)
                .unwrap_or_default();
            if !admitted {
                let pause = tokio::time::sleep(Duration::from_secs(1));
                state.room.shutdown.run_until_cancelled(pause).await;
            }
            Some((Ok::<_, Infallible>(event), (state, show, account, admitted)))
        },
    )
    // The stream holds its slot of the cap until it ends.
    .map(move |e| {
        let _open = &slot;
        e
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Trade an admission token for a session lease, once: a retry while that session lives gets
/// the same session back (a lost answer costs nothing); after it ended, the admission is spent.
#[utoipa::path(post, path = "/v1/events/{id}/enter", params(("id" = String, Path)), request_body = EnterRequest,
    security(("bearer" = [])), responses((status = 200, body = Entry), (status = 403), (status = 429)))]
async fn enter(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<EnterRequest>,
) -> Result<Response, ApiError> {
    let (show, _) = show_with_room(&state, &id).await?;
    let (account, room) = (caller.account.to_string(), &state.room);
    let refused = |code: ErrorCode, detail: &str| err(StatusCode::FORBIDDEN, code, detail);
    let claims: AdmissionClaims = room
        .signer
        .verify(
            &body.admission_token,
            tokens::ADMISSION,
            &account,
            &show.to_string(),
        )
        .map_err(|_| {
            refused(
                ErrorCode::InvalidAdmission,
                "the admission token is not yours, or not valid",
            )
        })?;
    let now = now_ms();
    let lease_ms = now + room.lease().as_millis() as i64;
    let fallback = claims.fallback;
    let sid = if fallback {
        crate::fallback::new_id()
    } else {
        uuid::Uuid::new_v4().to_string()
    };
    let paused_now = if fallback {
        Ok(0)
    } else {
        room.store.paused_ms(show).await
    };
    let paused_now = match paused_now {
        Ok(p) => p,
        Err(e) => return Err(store_unavailable(&e, ADMISSION_KEPT)),
    };
    if now > claims.exp_ms + (paused_now - claims.paused_ms) {
        return Err(refused(
            ErrorCode::AdmissionExpired,
            "the grace window passed; join the line again",
        ));
    }
    let entered = if fallback {
        Ok(enter_fallback(room, &claims.jti, sid, show, &account, lease_ms).await?)
    } else {
        room.store
            .enter(
                show,
                &claims.jti,
                &sid,
                now,
                room.lease().as_millis() as i64,
                room.config.target,
            )
            .await
    };
    match entered {
        Ok((Entered::Yes | Entered::Again, sid)) => {
            metrics::counter!(onsale_telemetry::metrics::WAITING_ROOM_ENTRIES_TOTAL).increment(1);
            Ok(Json(Entry {
                session_id: session(room, &account, show, &sid, lease_ms, fallback),
                lease_expires_at: ms_to_time(lease_ms),
            })
            .into_response())
        }
        Ok((Entered::Replayed, _)) => Err(refused(
            ErrorCode::AdmissionUsed,
            "this admission was already used",
        )),
        Ok((Entered::Full, _)) => {
            let mut r = err(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::ZoneFull,
                "the sale is at capacity this second; your admission stays good, retry shortly",
            )
            .into_response();
            r.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("2"));
            Ok(r)
        }
        Err(e) => Err(store_unavailable(&e, ADMISSION_KEPT)),
    }
}

/// An entry while Redis is away: PostgreSQL remembers the admission, so it enters once.
async fn enter_fallback(
    room: &WaitingRoom,
    jti: &str,
    sid: String,
    show: ShowId,
    account: &str,
    lease_ms: i64,
) -> Result<(Entered, String), ApiError> {
    let at = ms_to_time(lease_ms);
    match crate::fallback::enter(&room.pool, jti, &sid, &show.to_string(), account, at).await {
        Ok(crate::fallback::FallbackEntry::Session(sid)) => Ok((Entered::Yes, sid)),
        Ok(crate::fallback::FallbackEntry::Used) => Ok((Entered::Replayed, sid)),
        Err(e) => {
            tracing::warn!(error = %e, "the fallback's sessions are unreachable");
            Err(ApiError::unavailable())
        }
    }
}

/// Renew the session's lease (every ~30 s). The answer carries the session token to use from
/// now on (the same session, its signed lease renewed).
#[utoipa::path(post, path = "/v1/events/{id}/heartbeat", params(("id" = String, Path)), request_body = HeartbeatRequest,
    security(("bearer" = [])), responses((status = 200, description = "{leaseExpiresAt, sessionId}"), (status = 403), (status = 410)))]
async fn heartbeat(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HeartbeatRequest>,
) -> Result<Response, ApiError> {
    let (show, account, claims) = own_session(&state, &id, &caller, &body.session_id).await?;
    let room = &state.room;
    let now = now_ms();
    let until = now + room.lease().as_millis() as i64;
    let (live, until) = if claims.fallback {
        // A session the fallback opened lives in PostgreSQL: renewed only if it is there.
        let renewed = crate::fallback::heartbeat(
            &room.pool,
            &claims.sid,
            &show.to_string(),
            &account,
            ms_to_time(until),
        )
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "the fallback's sessions are unreachable");
            ApiError::unavailable()
        })?;
        (renewed, until)
    } else {
        match room.store.heartbeat(show, &claims.sid, until, now).await {
            Ok(live) => (live, until),
            Err(e) => {
                // Redis is away: the lease signed into the token stands, never extended.
                redis_down(&e);
                (claims.lease_ms > now, claims.lease_ms)
            }
        }
    };
    if !live {
        return Err(err(
            StatusCode::GONE,
            ErrorCode::SessionExpired,
            "the session's lease expired; join the line again",
        ));
    }
    Ok(Json(Entry {
        lease_expires_at: ms_to_time(until),
        session_id: session(room, &account, show, &claims.sid, until, claims.fallback),
    })
    .into_response())
}

/// Leave the sale (checkout done, or the fan gives up): the session ends and its slot goes to
/// the next fan at once instead of when the lease lapses. Idempotent.
#[utoipa::path(post, path = "/v1/events/{id}/leave", params(("id" = String, Path)), request_body = HeartbeatRequest,
    security(("bearer" = [])), responses((status = 204), (status = 403)))]
async fn leave(
    State(state): State<RoomState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HeartbeatRequest>,
) -> Result<Response, ApiError> {
    let (show, account, claims) = own_session(&state, &id, &caller, &body.session_id).await?;
    let room = &state.room;
    if claims.fallback {
        crate::fallback::leave(&room.pool, &claims.sid, &show.to_string(), &account)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "the fallback's sessions are unreachable");
                ApiError::unavailable()
            })?;
    } else {
        room.store.leave(show, &claims.sid).await.map_err(|e| {
            store_unavailable(
                &e,
                "the waiting room's store is unreachable; the session ends with its lease",
            )
        })?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
