//! The caps on long-lived streams: per process, per client address and per account.

use super::*;

/// A per-process cap on open streams, and a cap per client address and per account within
/// it: a stream holds a [`StreamSlot`] for as long as it runs.
#[derive(Debug, Clone)]
pub struct StreamSlots {
    pub(super) slots: Arc<Semaphore>,
    pub(super) clients: Arc<StreamClients>,
}

/// The streams each client has open, against its caps (0: none).
#[derive(Debug)]
pub(super) struct StreamClients {
    pub(super) per_address: usize,
    pub(super) per_account: usize,
    pub(super) open: std::sync::Mutex<std::collections::HashMap<StreamKey, usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum StreamKey {
    Address(IpAddr),
    Account(String),
}

impl StreamClients {
    pub(super) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<StreamKey, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One open stream's share of the caps: dropping it (the stream ending) frees it.
#[derive(Debug)]
pub struct StreamSlot {
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) keys: Vec<StreamKey>,
    pub(super) clients: Arc<StreamClients>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.clients.lock();
        for key in self.keys.drain(..) {
            if let std::collections::hash_map::Entry::Occupied(mut e) = open.entry(key) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }
}

impl StreamSlots {
    /// `max` streams in all, `per_address` and `per_account` of them for one client (0: no
    /// cap).
    pub fn new(max: usize, per_address: usize, per_account: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            clients: Arc::new(StreamClients {
                per_address,
                per_account,
                open: std::sync::Mutex::default(),
            }),
        }
    }

    /// The seat-map streams' slots of `settings` (SSE and gRPC `StreamDeltas`).
    pub fn for_seat_maps(settings: &LimitSettings) -> Self {
        Self::new(
            settings.max_streams,
            settings.max_streams_per_address,
            settings.max_streams_per_account,
        )
    }

    /// The waiting room's status streams' slots of `settings`.
    pub fn for_lines(settings: &LimitSettings) -> Self {
        Self::new(
            settings.max_queue_streams,
            settings.max_streams_per_address,
            settings.max_streams_per_account,
        )
    }

    /// A slot for a new stream of a client at `address` (see [`ClientAddress`]) signed in as
    /// `account`: 429 `TOO_MANY_STREAMS` when that account or address has as many open as it
    /// may, 503 `TOO_MANY_STREAMS` when this process has; both with `Retry-After`.
    pub fn open(
        &self,
        address: Option<IpAddr>,
        account: Option<&str>,
    ) -> Result<StreamSlot, ApiError> {
        let c = &self.clients;
        let keys: Vec<(StreamKey, usize, &'static str)> = [
            account.map(|a| {
                (
                    StreamKey::Account(a.to_owned()),
                    c.per_account,
                    "this account",
                )
            }),
            address.map(|ip| {
                (
                    StreamKey::Address(address_key(ip)),
                    c.per_address,
                    "this address",
                )
            }),
        ]
        .into_iter()
        .flatten()
        .filter(|(_, cap, _)| *cap > 0)
        .collect();
        let mut open = c.lock();
        if let Some((_, _, who)) = keys
            .iter()
            .find(|(key, cap, _)| open.get(key).is_some_and(|n| n >= cap))
        {
            metrics::counter!(names::STREAMS_REFUSED_TOTAL, "cap" => "client").increment(1);
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::TooManyStreams,
                format!("{who} has as many streams open as it may; close one, or retry later"),
            )
            .retry_after(5));
        }
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!(names::STREAMS_REFUSED_TOTAL, "cap" => "process").increment(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::TooManyStreams,
                "this server has as many open streams as it serves; retry shortly",
            )
            .retry_after(5)
        })?;
        let keys: Vec<StreamKey> = keys.into_iter().map(|(key, _, _)| key).collect();
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(StreamSlot {
            _permit: permit,
            keys,
            clients: self.clients.clone(),
        })
    }
}
