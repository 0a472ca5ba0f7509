//! The seat map as the projections fold it: each row through `onsale_projections::fold` (the
//! one place the projections apply an event), each seat's status rewritten only when the fold
//! says the event touched it, as the seat-map projection rewrites only the rows it marks. After
//! every step it must equal the log: the status of every seat as a full fold of the log has it,
//! and free exactly where the oracle has nobody on the seat. A seat an event changes without
//! the fold naming it would leave the fans' map wrong, and shows here. The ticket issuer
//! consumes the same fold.

use std::collections::BTreeMap;

use onsale_domain::transitions::SeatStatus;
use onsale_domain::Show;
use onsale_payments::tickets::TicketChanges;
use onsale_projections::fold::{apply, status_at, LogEvent};

#[derive(Debug, Default)]
pub struct Projected {
    show: Show,
    /// Seat index -> status, as written by touched seats only.
    seats: BTreeMap<u32, SeatStatus>,
    /// The ticket issuer, another consumer of the same fold.
    pub issuer: TicketChanges,
}

impl Projected {
    /// Folds the next rows of the show's log.
    pub fn fold(&mut self, rows: &[LogEvent]) {
        for log in rows {
            let (seats, issuer) = (&mut self.seats, &mut self.issuer);
            apply(&mut self.show, log, |ctx| {
                for (i, _) in ctx.touched {
                    seats.insert(*i, status_at(ctx.after, *i));
                }
                issuer.event(ctx);
            });
        }
    }

    /// The projected map against the full fold and the oracle's occupied seats.
    pub fn matches(&self, occupied: &[String]) -> Result<(), String> {
        for (i, (name, seat)) in self.show.seats().enumerate() {
            let i = u32::try_from(i).map_err(|e| e.to_string())?;
            let projected = self.seats.get(&i).copied().unwrap_or(SeatStatus::Available);
            let folded = seat.status();
            if projected != folded {
                return Err(format!(
                    "the seat map has {name} {projected:?}, the log's fold {folded:?}"
                ));
            }
            let taken = occupied.binary_search_by(|s| s.as_str().cmp(name)).is_ok();
            if taken == (folded == SeatStatus::Available) {
                return Err(format!(
                    "the fold has {name} {folded:?}, the oracle has it {}",
                    if taken { "taken" } else { "free" }
                ));
            }
        }
        Ok(())
    }
}
