//! What the registry hands an owner and the owner answers: the work, its reply channel and the
//! store's errors as callers see them. A leaf: the registry and the actor both import it.

use onsale_domain::ShowCommand;
use onsale_eventlog::StoreError;
use tokio::sync::oneshot;

use crate::protocol::{Answer, CommandError, Found, ShowQuery};

/// What a job is answered with.
pub(super) enum Reply {
    Answer(Answer),
    Found(Found),
}

#[derive(Clone)]
pub(super) enum Work {
    Command(ShowCommand),
    Ask(ShowQuery),
    Sweep,
    /// Claim and load the show (a dead node's show: its sweeper must run), answered `Done`.
    Wake,
}

pub(super) struct Job {
    pub(super) work: Work,
    pub(super) reply: Option<oneshot::Sender<Result<Reply, CommandError>>>,
    /// How many times the job was decided again after a version conflict.
    pub(super) attempts: u32,
    /// Forwarded by another node: never forwarded again.
    pub(super) forwarded: bool,
    /// The caller's span: the owner's spans for this job are its children (docs/adr/019).
    pub(super) span: tracing::Span,
}

impl Job {
    /// The owner's own sweep of lapsed holds: nobody waits for it.
    pub(super) fn sweep() -> Self {
        Self {
            work: Work::Sweep,
            reply: None,
            attempts: 0,
            forwarded: false,
            span: tracing::Span::none(),
        }
    }
}

/// Answers a job's caller, if anyone waits for it.
pub(super) fn reply(job: Job, answer: Result<Reply, CommandError>) {
    if let Some(reply) = job.reply {
        let _ = reply.send(answer);
    }
}

pub(super) fn store_error(e: StoreError) -> CommandError {
    match e {
        StoreError::Unavailable(_) | StoreError::Conflict | StoreError::Fenced => {
            CommandError::Unavailable
        }
        StoreError::Corrupt(m) => CommandError::Internal(m),
    }
}
