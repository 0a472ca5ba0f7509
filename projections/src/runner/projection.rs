//! What the runner folds into: a read model ([`Projection`]), and the object-safe face the
//! runner keeps each behind ([`Member`]).

use super::*;

/// A read model folded from the log.
pub trait Projection: Send + 'static {
    /// Its name: the key of its positions (and of its metrics' `projection` label).
    const NAME: &'static str;

    /// A show's fold was loaded from the table at the projection's stored position.
    fn loaded(&mut self, show_id: ShowId, show: &Show);

    /// The show's fold was dropped (idle, or after an error or a rebalance): forget what is kept
    /// of it; [`Projection::loaded`] comes again before its next event, and what was told since
    /// the last flush is told again.
    fn unloaded(&mut self, _show_id: ShowId) {}

    /// One event, applied to the show's fold.
    fn event(&mut self, ctx: &EventCtx<'_>);

    /// Writes what the events since the last flush changed, in the batch's transaction.
    fn flush(&mut self, tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// About once a second, in a transaction of its own.
    fn tick(&mut self, _tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send {
        async { Ok(()) }
    }

    /// Deletes every row of the read model (its positions are deleted by [`reset`]).
    fn reset(tx: &mut PgConnection) -> impl Future<Output = anyhow::Result<()>> + Send;
}

pub(super) type Io<'a> = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;

/// A [`Projection`] as a runner drives it beside others.
pub(super) trait Member: Send {
    fn loaded(&mut self, show_id: ShowId, show: &Show);
    fn unloaded(&mut self, show_id: ShowId);
    fn event(&mut self, ctx: &EventCtx<'_>);
    fn flush<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a>;
    fn tick<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a>;
}

impl<P: Projection> Member for P {
    fn loaded(&mut self, show_id: ShowId, show: &Show) {
        Projection::loaded(self, show_id, show);
    }

    fn unloaded(&mut self, show_id: ShowId) {
        Projection::unloaded(self, show_id);
    }

    fn event(&mut self, ctx: &EventCtx<'_>) {
        Projection::event(self, ctx);
    }

    fn flush<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a> {
        Box::pin(Projection::flush(self, tx))
    }

    fn tick<'a>(&'a mut self, tx: &'a mut PgConnection) -> Io<'a> {
        Box::pin(Projection::tick(self, tx))
    }
}
