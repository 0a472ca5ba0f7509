//! The 50,000-seat arena every demo and benchmark uses, and the seat-index arithmetic the
//! wrk and pgbench scripts mirror.

use serde_json::{json, Value};

pub(crate) const SECTIONS: u32 = 25;
pub(crate) const ROWS: u32 = 40;
pub(crate) const SEATS_PER_ROW: u32 = 50;
pub(crate) const SEATS: u32 = SECTIONS * ROWS * SEATS_PER_ROW;
/// Skewed demand: this share of requests wants the front `HOT_SEATS` seats.
pub(crate) const HOT_SHARE: f64 = 0.8;
pub(crate) const HOT_SEATS: u32 = SEATS / 10;

pub(crate) fn venue_body() -> Value {
    let sections: Vec<Value> = (0..SECTIONS)
        .map(|s| {
            json!({
                "section": (101 + s).to_string(),
                "priceTier": if s < 3 { "A" } else if s < 10 { "B" } else { "C" },
                "rows": (1..=ROWS).map(|r| json!({"row": r.to_string(), "seats": SEATS_PER_ROW})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({"name": "Onsale Arena", "city": "Oslo", "sections": sections})
}

/// A venue of one general-admission floor, FLOOR, of `capacity` places at tier C.
pub(crate) fn floor_body(capacity: u32) -> Value {
    json!({"name": "Onsale Club", "city": "Oslo", "sections": [
        {"section": "FLOOR", "priceTier": "C", "capacity": capacity}]})
}

pub(crate) fn prices() -> Value {
    json!({"A": 15000, "B": 9000, "C": 4500})
}

/// Seat index (0-based, best first) to its id.
pub(crate) fn seat_id(i: u32) -> String {
    let section = 101 + i / (ROWS * SEATS_PER_ROW);
    let row = 1 + (i % (ROWS * SEATS_PER_ROW)) / SEATS_PER_ROW;
    let seat = 1 + i % SEATS_PER_ROW;
    format!("{section}-{row}-{seat}")
}

/// `n` adjacent seats in one row, starting near a seat drawn from the distribution.
pub(crate) fn pick(rng: &mut impl rand::Rng, n: u32, skewed: bool) -> Vec<String> {
    let i = if skewed && rng.random_bool(HOT_SHARE) {
        rng.random_range(0..HOT_SEATS)
    } else {
        rng.random_range(0..SEATS)
    };
    let row_start = i - i % SEATS_PER_ROW;
    let start = row_start + (i % SEATS_PER_ROW).min(SEATS_PER_ROW - n);
    (start..start + n).map(seat_id).collect()
}
