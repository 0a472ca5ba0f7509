//! The OpenAPI document made exact, as a client generator and a fuzzer read it: every status
//! an operation can answer, with its problem+json body and `Retry-After` where it is sent;
//! every rule the server checks on a path, header or query parameter and on a request body
//! (lengths, patterns, ranges, which fields go together); and links between operations, so a
//! stateful client (or schemathesis) can follow a venue to an event to a hold to an order.
//!
//! The handlers' `utoipa` annotations say what each operation succeeds with and its domain
//! errors; what every route shares (the edge's own refusals: a token, a body too large, a rate,
//! a deadline, an outage) is added here once, by rule, so no operation can forget one.

use serde_json::{json, Map, Value};

/// A show (event), venue or ticket id: a UUID.
const UUID: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
/// A section, row or price tier label (`onsale_domain::valid_label`).
const LABEL: &str = "^[A-Za-z0-9]{1,16}$";
/// A seat id: `<section>-<row>-<number>`.
const SEAT: &str = "^[A-Za-z0-9]{1,16}-[A-Za-z0-9]{1,16}-[1-9][0-9]{0,8}$";
/// An `Idempotency-Key` or account id: visible ASCII.
const KEY: &str = "^[!-~]{1,255}$";
/// Text PostgreSQL can keep: no NUL character.
const NO_NUL: &str = "^[^\\u0000]*$";
/// Text a person typed: not only blanks.
const TEXT: &str = "\\S";

fn scoped(prefix: &str) -> String {
    format!("^{prefix}_[0-9a-fA-F]{{32}}_[0-9a-fA-F]{{32}}$")
}

/// The schema of a path, header or query parameter, by its name and the path it is in.
fn parameter_schema(path: &str, name: &str) -> Option<Value> {
    Some(match name {
        "id" if path.starts_with("/v1/events/") => {
            json!({"type": "string", "pattern": UUID, "maxLength": 45})
        }
        "id" if path.starts_with("/v1/venues/") => {
            json!({"type": "string", "pattern": UUID, "maxLength": 45})
        }
        "id" if path.starts_with("/v1/holds/") => json!({"type": "string", "pattern": scoped("h")}),
        "id" if path.starts_with("/v1/orders/") => {
            json!({"type": "string", "pattern": scoped("o")})
        }
        "ticketId" => json!({"type": "string", "pattern": UUID, "maxLength": 45}),
        "seat" => json!({"type": "string", "pattern": SEAT}),
        "section" => json!({"type": "string", "pattern": LABEL}),
        "at" => json!({"type": "string", "format": "date-time"}),
        "atSequence" => json!({"type": "integer", "format": "int64", "minimum": 1}),
        // The catalog search (`GET /v1/events`).
        "limit" if path == "/v1/events" => json!({"type": "integer", "minimum": 1, "maximum": 100}),
        // Type-ahead (`GET /v1/events/suggest`): something typed, blanks trimmed.
        "limit" if path == "/v1/events/suggest" => {
            json!({"type": "integer", "minimum": 1, "maximum": 20})
        }
        "q" if path == "/v1/events/suggest" => json!({"type": "string", "minLength": 1,
            "maxLength": 100, "pattern": "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"}),
        "q" => json!({"type": "string", "maxLength": 200, "pattern": NO_NUL}),
        "month" => json!({"type": "string", "pattern": "^([0-9]{4}-(0[1-9]|1[0-2]))?$"}),
        "priceBand" => json!({"type": "string", "enum": ["", "UNDER_25", "25_TO_50", "50_TO_100",
            "100_TO_200", "200_AND_OVER"]}),
        "city" => json!({"type": "string", "maxLength": 100, "pattern": NO_NUL}),
        // An empty filter is an absent one.
        "date" => json!({"anyOf": [
            {"type": "string", "format": "date"}, {"type": "string", "maxLength": 0}]}),
        "from" | "to" => json!({"anyOf": [
            {"type": "string", "format": "date"}, {"type": "string", "format": "date-time"},
            {"type": "string", "maxLength": 0}]}),
        "status" => {
            json!({"type": "string", "enum": ["", "SCHEDULED", "ON_SALE", "SOLD_OUT", "STARTED"]})
        }
        "minPrice" | "maxPrice" => json!({"type": "integer", "format": "int64", "minimum": 0}),
        "limit" => json!({"type": "integer", "minimum": 1, "maximum": 1000}),
        "cursor" => json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{0,300}$"}),
        "Idempotency-Key" => json!({"type": "string", "pattern": KEY, "maxLength": 255}),
        _ => return None,
    })
}

/// Rules of request and response bodies the struct annotations cannot say (bounds of the
/// domain's checks, fields that go together, the codes a field takes), merged into the
/// component schemas.
fn body_rules() -> Vec<(&'static str, Value)> {
    [catalog_rules(), purchase_rules()].concat()
}

/// The rules of the sign-in, venue and show bodies.
fn catalog_rules() -> Vec<(&'static str, Value)> {
    vec![
        (
            // A scanner's development token names its gates: a venue, or shows.
            "DevSignIn",
            json!({"anyOf": [
                {"properties": {"role": {"enum": ["fan", "admin", "auditor"]}}},
                {"required": ["role"], "properties": {"role": {"const": "scanner"}},
                 "anyOf": [
                    {"required": ["venue"], "properties": {"venue": {"type": "string"}}},
                    {"required": ["shows"], "properties": {"shows": {"minItems": 1}}}]}]}),
        ),
        (
            "NewVenue",
            json!({"properties": {
                "name": {"minLength": 1, "maxLength": 200, "pattern": TEXT},
                "city": {"minLength": 1, "maxLength": 100, "pattern": TEXT},
                "sections": {"minItems": 1, "maxItems": 200}}}),
        ),
        (
            "SectionLayoutDoc",
            json!({
                "properties": {
                    "section": {"pattern": LABEL},
                    "priceTier": {"pattern": LABEL},
                    "rows": {"maxItems": 100},
                    "capacity": {"minimum": 1, "maximum": onsale_domain::layout::MAX_SEATS_PER_SHOW}},
                // Rows of seats, or a general-admission capacity; a null is an absence.
                "oneOf": [
                    {"required": ["rows"], "properties": {
                        "rows": {"type": "array", "minItems": 1}, "capacity": {"type": "null"}}},
                    {"required": ["capacity"], "properties": {
                        "capacity": {"type": "integer"}, "rows": {"maxItems": 0}}}]}),
        ),
        (
            "RowLayoutDoc",
            json!({"properties": {
                "row": {"pattern": LABEL},
                "seats": {"minimum": 1, "maximum": onsale_domain::layout::MAX_SEATS_PER_ROW}}}),
        ),
        (
            "NewEvent",
            json!({"properties": {
                "name": {"minLength": 1, "maxLength": 200, "pattern": TEXT},
                "performer": {"minLength": 1, "maxLength": 200, "pattern": TEXT},
                "venueId": {"pattern": UUID},
                "prices": {"propertyNames": {"pattern": LABEL},
                           "additionalProperties": {"type": "integer", "minimum": 0, "maximum": onsale_domain::MAX_PRICE_CENTS}},
                "holdTtlSeconds": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_HOLD_TTL_SECONDS},
                "onSaleHoldTtlSeconds": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_HOLD_TTL_SECONDS},
                "onSaleWindowSeconds": {"minimum": 0, "maximum": onsale_domain::show::messages::MAX_ON_SALE_WINDOW_SECONDS},
                "maxSeatsPerAccount": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_SEAT_CAP},
                "joinChallengeBits": {"minimum": 0, "maximum": onsale_domain::show::messages::MAX_JOIN_CHALLENGE_BITS},
                "maxFailedPayments": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_FAILED_PAYMENTS}}}),
        ),
        (
            "SalePolicyDoc",
            json!({"properties": {
                "holdTtlSeconds": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_HOLD_TTL_SECONDS},
                "onSaleHoldTtlSeconds": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_HOLD_TTL_SECONDS},
                "onSaleWindowSeconds": {"minimum": 0, "maximum": onsale_domain::show::messages::MAX_ON_SALE_WINDOW_SECONDS},
                "maxSeatsPerAccount": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_SEAT_CAP},
                "joinChallengeBits": {"minimum": 0, "maximum": onsale_domain::show::messages::MAX_JOIN_CHALLENGE_BITS},
                "maxFailedPayments": {"minimum": 1, "maximum": onsale_domain::show::messages::MAX_FAILED_PAYMENTS}}}),
        ),
    ]
}

/// The rules of the hold, order and scan bodies.
fn purchase_rules() -> Vec<(&'static str, Value)> {
    vec![
        (
            "HoldRequest",
            json!({
                "properties": {
                    "seatIds": {"minItems": 1, "maxItems": onsale_domain::show::messages::MAX_SEATS_PER_HOLD, "items": {"type": "string", "pattern": SEAT}},
                    "quantity": {"minimum": 1, "maximum": u32::MAX},
                    "section": {"pattern": LABEL}},
                // Explicit seats, or a quantity (and maybe a section); a null is an absence.
                "oneOf": [
                    {"required": ["seatIds"], "properties": {
                        "seatIds": {"type": "array"}, "quantity": {"type": "null"}, "section": {"type": "null"}}},
                    {"required": ["quantity"], "properties": {
                        "quantity": {"type": "integer"}, "seatIds": {"type": "null"}}}]}),
        ),
        (
            "OrderRequest",
            json!({"properties": {
                "holdId": {"pattern": scoped("h")},
                "paymentToken": {"minLength": 1, "maxLength": 128, "pattern": TEXT}}}),
        ),
        (
            "OrderResponse",
            json!({"properties": {"failureReason": {
                "enum": ["CARD_DECLINED", "PAYMENT_TIMED_OUT", "FAILED", null]}}}),
        ),
        (
            "DevSignIn",
            json!({"properties": {"sub": {"pattern": "^[!-~]{1,128}$", "maxLength": 128}}}),
        ),
        (
            "ScanRequest",
            json!({"properties": {
                "eventId": {"pattern": UUID},
                "code": {"minLength": 1, "maxLength": 200}}}),
        ),
    ]
}

/// The operations a budget covers (`limits::RateLimits`): the writes that reach a show, joins
/// and scans, and every read under `/v1/`.
fn rate_limited(method: &str, path: &str) -> bool {
    axum::http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .is_ok_and(|m| crate::limits::budgeted(&m, path))
}

/// Links from an operation's success to the operations that take what it made.
fn links(method: &str, path: &str) -> Option<(&'static str, Value)> {
    let event =
        |op: &str| json!({"operationId": op, "parameters": {"id": "$response.body#/eventId"}});
    Some(match (method, path) {
        ("post", "/v1/venues") => (
            "201",
            json!({
            "CreateEventAtVenue": {"operationId": "create_event",
                "requestBody": {"venueId": "$response.body#/venueId"}}}),
        ),
        ("post", "/v1/events") => (
            "201",
            json!({
            "GetEvent": event("get_event"),
            "GetSeatMap": event("seat_map"),
            "HoldSeats": event("create_hold")}),
        ),
        ("post", "/v1/events/{id}/holds") => (
            "201",
            json!({
            "GetHold": {"operationId": "get_hold", "parameters": {"id": "$response.body#/holdId"}},
            "ReleaseHold": {"operationId": "release_hold", "parameters": {"id": "$response.body#/holdId"}},
            "PlaceOrder": {"operationId": "place_order", "requestBody": {"holdId": "$response.body#/holdId"}}}),
        ),
        ("post", "/v1/orders") => (
            "202",
            json!({
            "GetOrder": {"operationId": "get_order", "parameters": {"id": "$response.body#/orderId"}},
            "CancelOrder": {"operationId": "cancel_order", "parameters": {"id": "$response.body#/orderId"}}}),
        ),
        _ => return None,
    })
}

fn problem(description: &str) -> Value {
    json!({"description": description,
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}})
}

/// `Retry-After` on a response: sent with every answer of its status (`always`), or with some
/// of them (a 429 `HOLD_LIMIT` has none: waiting does not lift it).
fn retry_after(mut response: Value, always: bool) -> Value {
    response["headers"] = json!({"Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": always,
        "schema": {"type": "integer", "minimum": 1}}});
    response
}

/// The schema of one server-sent event with these names.
fn sse(names: &[&str]) -> Value {
    json!({"schema": {
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"type": "string", "enum": names},
            "data": {"type": "string", "description": "A JSON document"},
            "id": {"type": "string"},
            "retry": {"type": "integer", "minimum": 0}}}})
}

/// Deep merge of `patch` into `target` (objects merge, anything else replaces).
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

/// The document, exact: see the module's documentation.
pub fn exact(mut doc: Value) -> Value {
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, rules) in body_rules() {
            if let Some(schema) = schemas.get_mut(name) {
                merge(schema, rules);
            }
        }
    }
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return doc;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            complete(method, path, op);
        }
    }
    doc
}

fn complete(method: &str, path: &str, op: &mut Value) {
    if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
        for p in params.iter_mut() {
            let name = p["name"].as_str().unwrap_or_default().to_owned();
            if let Some(schema) = parameter_schema(path, &name) {
                p["schema"] = schema;
            }
        }
    }
    let secured = op
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let has_body = op.get("requestBody").is_some();
    let link = links(method, path);
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    // Every error is problem+json, whatever the annotation said.
    for (status, response) in responses.iter_mut() {
        if status.as_str() >= "400" {
            let description = response["description"]
                .as_str()
                .filter(|d| !d.is_empty())
                .unwrap_or("see the problem's code")
                .to_owned();
            *response = problem(&description);
        }
    }
    add_errors(responses, method, path, secured, has_body);
    if let Some((status, links)) = link {
        if let Some(r) = responses.get_mut(status) {
            r["links"] = links;
        }
    }
    success_content(responses, method, path);
}

/// The errors every route of its kind may answer, where the annotation did not say them:
/// 400 always, 401 and 403 when it takes a token, 404 and 422 when its path names something,
/// 413, 415 and 422 when it takes a body, 429 when it spends a budget, and 503 everywhere
/// (the last two with Retry-After).
fn add_errors(
    responses: &mut Map<String, Value>,
    method: &str,
    path: &str,
    secured: bool,
    has_body: bool,
) {
    let mut add = |status: &str, response: Value| {
        responses.entry(status.to_owned()).or_insert(response);
    };
    add("400", problem("A path, query or header parameter that does not parse (INVALID_REQUEST, IDEMPOTENCY_KEY_REQUIRED)"));
    if secured {
        add(
            "401",
            problem("No bearer token, or one not valid (UNAUTHENTICATED)"),
        );
        add(
            "403",
            problem("The caller's role may not do this (FORBIDDEN)"),
        );
    }
    if path.contains('{') {
        add("404", problem("No such resource, or not the caller's"));
        add(
            "422",
            problem("An id in the path that does not parse (INVALID_REQUEST)"),
        );
    }
    if has_body {
        add("413", problem("The body is larger than the route takes: 64 KiB, 1 MiB for a venue (PAYLOAD_TOO_LARGE)"));
        add(
            "415",
            problem("The body is not application/json (UNSUPPORTED_MEDIA_TYPE)"),
        );
        add("422", problem("The body is not valid JSON of the request's schema, or breaks a rule of it (INVALID_REQUEST, MALFORMED_JSON)"));
    }
    if rate_limited(method, path) {
        let r = retry_after(
            problem(
                "Too many requests from this account or address (RATE_LIMITED), or, for a stream, too many open from it (TOO_MANY_STREAMS); with Retry-After",
            ),
            false,
        );
        match responses.get_mut("429") {
            Some(existing) => existing["headers"] = r["headers"].clone(),
            None => {
                responses.insert("429".into(), r);
            }
        }
    }
    let unavailable = retry_after(
        problem(
            "An outage (UNAVAILABLE), a deadline (REQUEST_TIMEOUT), a projection behind (PROJECTION_BEHIND) or a cap (TOO_MANY_STREAMS): retry after Retry-After",
        ),
        true,
    );
    match responses.get_mut("503") {
        Some(existing) => existing["headers"] = unavailable["headers"].clone(),
        None => {
            responses.insert("503".into(), unavailable);
        }
    }
}

/// A success documented without a body still answers JSON; the streams answer
/// text/event-stream (the waiting room's view either, by its Accept header), each event
/// described as schemathesis and OpenAPI 3.2 read one: its name, its data (JSON text), its id.
fn success_content(responses: &mut Map<String, Value>, method: &str, path: &str) {
    let object = json!({"schema": {"type": "object"}});
    let content = match (method, path) {
        ("get", "/v1/events/{id}/updates") => {
            json!({"text/event-stream": sse(&["delta", "resync", "closing"])})
        }
        ("get", "/v1/events/{id}/waiting-room") => json!({
            "application/json": object,
            "text/event-stream": sse(&["status", "admitted", "closing"])}),
        _ => json!({"application/json": object}),
    };
    for (status, response) in responses.iter_mut() {
        let empty = response
            .get("content")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        if status.starts_with('2') && status != "204" && empty {
            response["content"] = content.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_gets_the_edges_answers_as_problems() {
        let doc = exact(json!({
            "paths": {"/v1/events/{id}/holds": {"post": {
                "operationId": "create_hold",
                "security": [{"bearer": []}],
                "parameters": [{"name": "id", "in": "path", "schema": {"type": "string"}}],
                "requestBody": {"content": {}},
                "responses": {"201": {"description": ""}, "409": {"description": "SEAT_UNAVAILABLE",
                    "content": {"application/json": {}}}}}}},
            "components": {"schemas": {"HoldRequest": {"type": "object", "properties": {}}}}
        }));
        let op = &doc["paths"]["/v1/events/{id}/holds"]["post"];
        for status in [
            "400", "401", "403", "404", "409", "413", "415", "422", "429", "503",
        ] {
            assert!(
                op["responses"][status]["content"]["application/problem+json"].is_object(),
                "{status}"
            );
        }
        assert!(op["responses"]["429"]["headers"]["Retry-After"].is_object());
        assert!(op["responses"]["503"]["headers"]["Retry-After"].is_object());
        assert_eq!(op["parameters"][0]["schema"]["pattern"], UUID);
        assert!(op["responses"]["201"]["links"]["PlaceOrder"].is_object());
        assert!(doc["components"]["schemas"]["HoldRequest"]["oneOf"].is_array());
    }

    #[test]
    fn every_operation_a_budget_covers_names_429_and_no_other() {
        for (method, path, budgeted) in [
            ("delete", "/v1/holds/{id}", true),
            ("post", "/v1/orders/{id}/cancel", true),
            ("post", "/v1/events/{id}/waiting-room", true),
            ("get", "/v1/events/{id}/updates", true),
            ("get", "/v1/events/{id}/waiting-room", true),
            ("post", "/v1/events", false),
            ("get", "/healthz", false),
            ("post", "/v1/payments/webhook", false),
        ] {
            assert_eq!(rate_limited(method, path), budgeted, "{method} {path}");
        }
    }
}
