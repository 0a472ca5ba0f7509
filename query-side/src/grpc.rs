//! The read side over gRPC (package `onsale.v1`), with gRPC-web on the same port for browsers.

use onsale_edge::ErrorCode;
use std::pin::Pin;

use axum::http::StatusCode;
use futures::{Stream, StreamExt};
use onsale_edge::auth::Caller;
use onsale_edge::limits::ClientAddress;
use onsale_edge::ApiError;
use onsale_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tower::Layer;

use crate::hub::Update;
use crate::seats::Seats;
use crate::snapshots::{Missing, Read};
use crate::{rest, QueryState};
use base64::Engine;

/// The three services as one axum router, gRPC-web enabled.
pub fn router(state: QueryState) -> axum::Router {
    tonic::service::Routes::new(tonic_web::GrpcWebLayer::new().layer(
        pb::seat_maps_server::SeatMapsServer::new(Grpc(state.clone())),
    ))
    .add_service(
        tonic_web::GrpcWebLayer::new()
            .layer(pb::orders_server::OrdersServer::new(Grpc(state.clone()))),
    )
    .add_service(
        tonic_web::GrpcWebLayer::new()
            .layer(pb::audit_server::AuditServer::new(Grpc(state.clone()))),
    )
    .add_service(
        tonic_web::GrpcWebLayer::new().layer(pb::events_server::EventsServer::new(Grpc(state))),
    )
    .into_axum_router()
}

#[derive(Debug, Clone)]
pub struct Grpc(QueryState);

/// The end of a stream when the server shuts down: UNAVAILABLE with a retry hint, so the
/// client resumes from its last `seq`.
fn closing() -> Status {
    let mut s =
        Status::unavailable("SHUTTING_DOWN: the server is shutting down; resume with after_seq");
    s.metadata_mut().insert(
        "retry-after",
        tonic::metadata::MetadataValue::from_static("1"),
    );
    s
}

async fn caller<T>(state: &QueryState, req: &Request<T>) -> Result<Caller, Status> {
    let token = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::into_status(ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthenticated,
                "authorization: Bearer metadata is required",
            ))
        })?;
    state
        .verifier
        .verify_fresh(token)
        .await
        .map_err(ApiError::into_status)
}

/// What the request asks besides the counts, as the REST routes read it: every seat (a section
/// named beside it is checked and otherwise moot), one section (a label of the venue grammar,
/// so an arbitrary string never becomes a cache key), or none (an empty section).
fn seats(section: &str, all: bool) -> Result<Seats, Status> {
    if !section.is_empty() {
        onsale_domain::ids::valid_label("section", section).map_err(|e| bad(&e.to_string()))?;
    }
    Ok(match (section.is_empty(), all) {
        (_, true) => Seats::All,
        (false, false) => Seats::Section(section.to_owned()),
        (true, false) => Seats::None,
    })
}

fn counts(c: &crate::hub::SectionCounts) -> pb::SectionCounts {
    pb::SectionCounts {
        section: c.section.clone(),
        total: c.total.max(0) as u32,
        available: c.available.max(0) as u32,
        held: c.held.max(0) as u32,
        sold: c.sold.max(0) as u32,
        general_admission: c.general_admission,
    }
}

fn bad(detail: &str) -> Status {
    ApiError::into_status(ApiError::new(
        StatusCode::BAD_REQUEST,
        ErrorCode::InvalidRequest,
        detail,
    ))
}

type DeltaStream = Pin<Box<dyn Stream<Item = Result<pb::SeatMapUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl pb::seat_maps_server::SeatMaps for Grpc {
    async fn get_seat_map(
        &self,
        req: Request<pb::GetSeatMapRequest>,
    ) -> Result<Response<pb::SeatMap>, Status> {
        let r = req.into_inner();
        let show = r
            .event_id
            .parse::<onsale_domain::ShowId>()
            .map_err(|e| ApiError::into_status(e.into()))?;
        let snap = match self
            .0
            .snapshots
            .get(show, &seats(&r.section, r.all_seats)?)
            .await
        {
            Read::Fresh(s) | Read::Stale(s) => s,
            Read::Missing(Missing::Show) => {
                return Err(ApiError::from(onsale_domain::ShowError::ShowNotFound).into_status())
            }
            Read::Missing(Missing::Section) => {
                return Err(ApiError::into_status(ApiError::new(
                    StatusCode::NOT_FOUND,
                    ErrorCode::UnknownSection,
                    "the show has no such section",
                )))
            }
            Read::Unavailable => {
                return Err(ApiError::into_status(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::Unavailable,
                    "the seat map is unreachable; retry shortly",
                )))
            }
        };
        let m = &snap.map;
        Ok(Response::new(pb::SeatMap {
            event_id: m.event_id.clone(),
            as_of: m.as_of.to_rfc3339(),
            lsn: m.lsn.clone(),
            seq: m.seq.max(0) as u64,
            sections: m.sections.iter().map(counts).collect(),
            seats: m
                .seats
                .iter()
                .flatten()
                .map(|s| pb::SeatState {
                    seat_id: s.seat_id.to_string(),
                    status: s.status.clone(),
                })
                .collect(),
            sold_seats: m
                .sold_seats
                .as_deref()
                .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
                .transpose()
                .map_err(|_| Status::internal("the map's bitmap did not decode"))?
                .unwrap_or_default(),
        }))
    }

    type StreamDeltasStream = DeltaStream;

    async fn stream_deltas(
        &self,
        req: Request<pb::StreamDeltasRequest>,
    ) -> Result<Response<DeltaStream>, Status> {
        let address = req
            .extensions()
            .get::<ClientAddress>()
            .map(|ClientAddress(ip)| *ip);
        let authorization = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let r = req.into_inner();
        let show = r
            .event_id
            .parse::<onsale_domain::ShowId>()
            .map_err(|e| ApiError::into_status(e.into()))?;
        let after = i64::try_from(r.after_seq).map_err(|_| bad("after_seq is too large"))?;
        let wanted = seats(&r.section, r.all_seats)?;
        let slot = self
            .0
            .open_stream(address, authorization.as_deref())
            .map_err(ApiError::into_status)?;
        let stream = self
            .0
            .subscribe(show, (after > 0).then_some(after))
            .await
            // The database's own words stay in the log (issue 53, item 11).
            .map_err(|e| {
                crate::unavailable::db_unavailable(sqlx::Error::Protocol(e.to_string()))
                    .into_status()
            })?
            .ok_or_else(|| ApiError::from(onsale_domain::ShowError::ShowNotFound).into_status())?;
        let out = stream.map(move |u| {
            // The stream holds its slot of the cap until it ends.
            let _open = &slot;
            Ok(pb::SeatMapUpdate {
                update: Some(match u {
                    Update::Delta(d) => pb::seat_map_update::Update::Delta(pb::Delta {
                        seq: d.seq as u64,
                        lsn: d.lsn.clone(),
                        as_of: d.at.to_rfc3339(),
                        sections: d.sections.iter().map(counts).collect(),
                        seats: d
                            .seats_of(&wanted)
                            .into_iter()
                            .map(|s| pb::SeatState {
                                seat_id: s.seat_id.to_string(),
                                status: s.status.clone(),
                            })
                            .collect(),
                    }),
                    Update::Resync { seq, reason } => {
                        pb::seat_map_update::Update::Resync(pb::Resync {
                            seq: seq.max(0) as u64,
                            reason: reason.to_owned(),
                        })
                    }
                    Update::Closing => return Err(closing()),
                }),
            })
        });
        Ok(Response::new(Box::pin(out)))
    }
}

#[tonic::async_trait]
impl pb::orders_server::Orders for Grpc {
    async fn get_order(
        &self,
        req: Request<pb::GetOrderRequest>,
    ) -> Result<Response<pb::Order>, Status> {
        let who = caller(&self.0, &req).await?;
        let r = rest::find_order(&self.0, &who, &req.get_ref().order_id)
            .await
            .map_err(ApiError::into_status)?;
        Ok(Response::new(pb::Order {
            order_id: r.order_id,
            event_id: r.show_id,
            hold_id: r.hold_id,
            status: r.status,
            seat_ids: r.seat_ids,
            total_cents: r.total_cents,
            placed_at: r.placed_at.to_rfc3339(),
            updated_at: r.updated_at.to_rfc3339(),
            failure_reason: r.failure_reason.unwrap_or_default(),
        }))
    }
}

fn summary(e: crate::catalog::EventSummary) -> pb::EventSummary {
    pb::EventSummary {
        event_id: e.event_id,
        name: e.name,
        performer: e.performer,
        venue_id: e.venue_id,
        venue_name: e.venue_name,
        city: e.city,
        starts_at: e.starts_at.to_rfc3339(),
        on_sale_at: e.on_sale_at.to_rfc3339(),
        status: e.status.as_str().to_owned(),
        min_price_cents: e.min_price_cents,
        max_price_cents: e.max_price_cents,
        waiting_room: e.waiting_room,
    }
}

#[tonic::async_trait]
impl pb::events_server::Events for Grpc {
    async fn search_events(
        &self,
        req: Request<pb::SearchEventsRequest>,
    ) -> Result<Response<pb::SearchEventsResponse>, Status> {
        let r = req.into_inner();
        let given = |s: String| (!s.is_empty()).then_some(s);
        let query = crate::catalog::SearchQuery {
            q: given(r.q),
            city: given(r.city),
            date: given(r.date),
            from: given(r.from),
            to: given(r.to),
            status: given(r.status),
            min_price: r.min_price_cents,
            max_price: r.max_price_cents,
            month: given(r.month),
            price_band: given(r.price_band),
            limit: (r.limit > 0).then_some(i64::from(r.limit)),
            cursor: given(r.cursor),
        };
        let found = crate::catalog::search(&self.0.pool, &self.0.search, &query)
            .await
            .map_err(ApiError::into_status)?;
        let facet = |f: Vec<crate::search::Facet>| {
            f.into_iter()
                .map(|f| pb::Facet {
                    value: f.value,
                    count: f.count,
                })
                .collect()
        };
        Ok(Response::new(pb::SearchEventsResponse {
            events: found.events.into_iter().map(summary).collect(),
            next_cursor: found.next_cursor.unwrap_or_default(),
            facets: found.facets.map(|f| pb::Facets {
                city: facet(f.city),
                month: facet(f.month),
                price_band: facet(f.price_band),
                status: facet(f.status),
            }),
            did_you_mean: found.did_you_mean.unwrap_or_default(),
        }))
    }

    async fn get_event(
        &self,
        req: Request<pb::GetEventRequest>,
    ) -> Result<Response<pb::EventSummary>, Status> {
        let id: onsale_domain::ShowId = req
            .get_ref()
            .event_id
            .parse()
            .map_err(|e: onsale_domain::InvalidId| ApiError::from(e).into_status())?;
        match crate::catalog::get(&self.0.pool, &id.to_string())
            .await
            .map_err(ApiError::into_status)?
        {
            Some(e) => Ok(Response::new(summary(e))),
            None => Err(ApiError::from(onsale_domain::ShowError::ShowNotFound).into_status()),
        }
    }
}

#[tonic::async_trait]
impl pb::audit_server::Audit for Grpc {
    async fn get_seat_history(
        &self,
        req: Request<pb::GetSeatHistoryRequest>,
    ) -> Result<Response<pb::SeatHistory>, Status> {
        let who = caller(&self.0, &req).await?;
        let r = req.get_ref();
        let page = crate::history::HistoryQuery {
            limit: (r.limit > 0).then_some(i64::from(r.limit)),
            cursor: (!r.cursor.is_empty()).then(|| r.cursor.clone()),
        };
        let h = crate::history::find_history(&self.0, &who, &r.event_id, &r.seat_id, &page)
            .await
            .map_err(ApiError::into_status)?;
        Ok(Response::new(pb::SeatHistory {
            seat_id: h.seat_id,
            entries: h
                .entries
                .into_iter()
                .map(|e| pb::SeatHistoryEntry {
                    sequence: e.sequence.unwrap_or(0),
                    at: e.at.to_rfc3339(),
                    r#type: e.kind,
                    hold_id: e.hold_id.unwrap_or_default(),
                    order_id: e.order_id.unwrap_or_default(),
                    account_id: e.account_id.unwrap_or_default(),
                    committed_at: e.committed_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
                    lsn: e.lsn.unwrap_or_default(),
                    actor: e.actor.unwrap_or_default(),
                    ticket_id: e.ticket_id.map(|t| t.to_string()).unwrap_or_default(),
                    detail_json: e
                        .detail
                        .and_then(|d| serde_json::to_string(&d).ok())
                        .unwrap_or_default(),
                })
                .collect(),
            next_cursor: h.next_cursor.unwrap_or_default(),
        }))
    }
}
