//! The venue's seat map: sections (each with a price tier) of rows of numbered seats, or
//! general-admission sections of a capacity. Seat ids are `"{section}-{row}-{number}"` with
//! numbers from 1, so sections and rows may not contain `-`.
//!
//! A general-admission section has no seats a fan picks, only a quantity; it is kept as units,
//! one per ticket it can sell, in buckets of at most [`GA_BUCKET`] (rows `GA1`, `GA2`, ...), so
//! every rule of the reserved seats (a unit is held or sold by one hold or order at a time, the
//! cap, payments, tickets, cancellation, history, the monitor) covers it unchanged (ADR 015).

use serde::{Deserialize, Serialize};

use crate::error::ShowError;
use crate::ids::{valid_label, SeatId};

/// Upper bounds that keep one show's aggregate a sensible size.
pub const MAX_SEATS_PER_ROW: u32 = 1_000;
pub const MAX_SEATS_PER_SHOW: u32 = 200_000;
/// The units of a general-admission section are kept in buckets of this many: a hold looks
/// for free units in one bucket, not across the whole floor.
pub const GA_BUCKET: u32 = 500;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RowLayout {
    pub row: String,
    pub seats: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SectionLayout {
    pub section: String,
    pub price_tier: String,
    pub rows: Vec<RowLayout>,
    /// General admission: the rows are the buckets of its units, not rows of seats.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub general_admission: bool,
}

impl SectionLayout {
    /// A general-admission section of `capacity` units, in buckets of [`GA_BUCKET`].
    pub fn general_admission(section: String, price_tier: String, capacity: u32) -> Self {
        let rows = (0..capacity.div_ceil(GA_BUCKET))
            .map(|b| RowLayout {
                row: format!("GA{}", b + 1),
                seats: GA_BUCKET.min(capacity - b * GA_BUCKET),
            })
            .collect();
        Self {
            section,
            price_tier,
            rows,
            general_admission: true,
        }
    }

    /// Seats, or units of a general-admission section.
    pub fn capacity(&self) -> u32 {
        self.rows.iter().map(|r| r.seats).sum()
    }
}

/// A validated venue layout. Sections are listed best first: best-available follows this order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct VenueLayout {
    sections: Vec<SectionLayout>,
}

impl VenueLayout {
    pub fn parse(sections: Vec<SectionLayout>) -> Result<Self, ShowError> {
        if sections.is_empty() {
            return Err(ShowError::Invalid(
                "a venue needs at least one section".into(),
            ));
        }
        let mut total: u64 = 0;
        let mut names = std::collections::HashSet::new();
        for s in &sections {
            valid_label("section", &s.section)?;
            valid_label("price tier", &s.price_tier)?;
            if !names.insert(s.section.as_str()) {
                return Err(ShowError::Invalid(format!(
                    "section {} appears twice",
                    s.section
                )));
            }
            if s.rows.is_empty() {
                return Err(ShowError::Invalid(format!(
                    "section {} has no {}",
                    s.section,
                    if s.general_admission {
                        "capacity"
                    } else {
                        "rows"
                    }
                )));
            }
            if s.general_admission
                && s.rows
                    != SectionLayout::general_admission(
                        s.section.clone(),
                        s.price_tier.clone(),
                        s.capacity(),
                    )
                    .rows
            {
                return Err(ShowError::Invalid(format!(
                    "general-admission section {} must be buckets GA1.. of {GA_BUCKET} units",
                    s.section
                )));
            }
            let mut rows = std::collections::HashSet::new();
            for r in &s.rows {
                valid_label("row", &r.row)?;
                if !rows.insert(r.row.as_str()) {
                    return Err(ShowError::Invalid(format!(
                        "row {} appears twice in section {}",
                        r.row, s.section
                    )));
                }
                if r.seats == 0 || r.seats > MAX_SEATS_PER_ROW {
                    return Err(ShowError::Invalid(format!(
                        "row {} of section {} must have 1 to {MAX_SEATS_PER_ROW} seats",
                        r.row, s.section
                    )));
                }
                total += u64::from(r.seats);
            }
        }
        if total > u64::from(MAX_SEATS_PER_SHOW) {
            return Err(ShowError::Invalid(format!(
                "a venue may have at most {MAX_SEATS_PER_SHOW} seats and general-admission places"
            )));
        }
        Ok(Self { sections })
    }

    pub fn sections(&self) -> &[SectionLayout] {
        &self.sections
    }

    /// Each section with the range of seat indices (layout order) it holds.
    pub fn section_ranges(&self) -> Vec<(&str, std::ops::Range<u32>)> {
        let mut start = 0;
        self.sections
            .iter()
            .map(|s| {
                let n: u32 = s.rows.iter().map(|r| r.seats).sum();
                start += n;
                (s.section.as_str(), start - n..start)
            })
            .collect()
    }

    pub fn seat_count(&self) -> u32 {
        self.sections
            .iter()
            .flat_map(|s| &s.rows)
            .map(|r| r.seats)
            .sum()
    }

    pub fn price_tiers(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|s| s.price_tier.as_str())
    }
}

pub fn seat_id(section: &str, row: &str, number: u32) -> SeatId {
    SeatId::of(section, row, number)
}
