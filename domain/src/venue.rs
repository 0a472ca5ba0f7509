//! A venue: catalog data, written once and shared by many shows. Its one event is kept in the
//! same log as the shows so a replay of the log has everything.

use serde::{Deserialize, Serialize};

use crate::chart::Chart;
use crate::layout::VenueLayout;

pub const VENUE_TYPE: &str = "venue";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum VenueEvent {
    VenueRegistered {
        name: String,
        city: String,
        layout: VenueLayout,
        /// Where its parts are drawn, when the venue was registered with a chart (checked
        /// against the layout); without one, [`Chart::generated`] draws it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chart: Option<Chart>,
    },
}

impl VenueEvent {
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::VenueRegistered { .. } => "VenueRegistered",
        }
    }
}
