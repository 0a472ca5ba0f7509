//! The domain's properties, its venue chart and its regions: pure, on no server.

mod chart;
mod properties;
mod region;
