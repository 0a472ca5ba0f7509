//! The venue's seat map: sections (each with a price tier) of rows of numbered seats.
//! Seat ids are `"{section}-{row}-{number}"` with numbers from 1, so sections and rows may not
//! contain `-`.

use serde::{Deserialize, Serialize};

use crate::error::ShowError;
use crate::ids::{valid_label, SeatId};

/// Upper bounds that keep one show's aggregate a sensible size.
pub const MAX_SEATS_PER_ROW: u32 = 1_000;
pub const MAX_SEATS_PER_SHOW: u32 = 200_000;

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
                    "section {} has no rows",
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
                "a venue may have at most {MAX_SEATS_PER_SHOW} seats"
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
