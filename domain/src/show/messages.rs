//! The show's commands (what may be asked) and events (what happened: the log's vocabulary,
//! stable forever).

use super::*;

/// What the edge stamps on a request that carries an `Idempotency-Key`: the key, and a
/// fingerprint of the request (route and body) so the same key with another body is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotency {
    pub key: IdempotencyKey,
    pub fingerprint: String,
}

/// Why a payment failed, in a word a client can act on (the `reason` beside it is for people).
/// Events logged before the code existed read as [`PaymentFailure::Failed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentFailure {
    /// The processor declined the card: another card may work.
    CardDeclined,
    /// The processor never answered definitively within the bound; any charge was voided.
    PaymentTimedOut,
    /// Failed for a reason the log does not classify.
    #[default]
    Failed,
}

impl PaymentFailure {
    /// The code as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CardDeclined => "CARD_DECLINED",
            Self::PaymentTimedOut => "PAYMENT_TIMED_OUT",
            Self::Failed => "FAILED",
        }
    }
}

/// The currency a show's prices are in, by its ISO 4217 code (`USD`, `EUR`, `JPY`): three
/// capital letters. Prices are in its minor unit (cents of a dollar, yen). Shows scheduled
/// before shows named one are in `USD`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Currency(String);

impl Currency {
    pub fn parse(code: &str) -> Result<Self> {
        if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) {
            Ok(Self(code.to_owned()))
        } else {
            Err(ShowError::Invalid(format!(
                "currency {:?} must be an ISO 4217 code: three capital letters",
                code.chars().take(16).collect::<String>()
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Currency {
    fn default() -> Self {
        Self("USD".into())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let code = String::deserialize(d)?;
        Self::parse(&code).map_err(serde::de::Error::custom)
    }
}

/// The catalog facts of a show, fixed when it is scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowInfo {
    pub show_id: ShowId,
    pub venue_id: VenueId,
    pub venue_name: String,
    pub city: String,
    pub name: String,
    pub performer: String,
    pub starts_at: DateTime<Utc>,
    pub on_sale_at: DateTime<Utc>,
    /// Cents per price tier.
    pub prices: BTreeMap<String, i64>,
    /// What the prices are in.
    #[serde(default)]
    pub currency: Currency,
    pub waiting_room: bool,
    /// The hold TTL outside the on-sale window (and in it, unless the policy sets its own).
    pub hold_ttl_seconds: u32,
    /// The on-sale policies; absent in shows scheduled before they existed (the defaults).
    #[serde(default)]
    pub policy: SalePolicy,
}

impl ShowInfo {
    /// Within the on-sale window: from the on-sale for `policy.on_sale_window_seconds`.
    pub fn in_on_sale_window(&self, now: DateTime<Utc>) -> bool {
        let window = Duration::seconds(i64::from(self.policy.on_sale_window_seconds));
        self.on_sale_at <= now && now < self.on_sale_at + window
    }

    /// The TTL of a hold committed at `now`: the on-sale TTL inside the window, else the show's.
    pub fn hold_ttl_at(&self, now: DateTime<Utc>) -> u32 {
        match self.policy.on_sale_hold_ttl_seconds {
            Some(ttl) if self.in_on_sale_window(now) => ttl,
            _ => self.hold_ttl_seconds,
        }
    }

    /// Explicit seat picks are refused at `now` (best-available only).
    pub fn picks_refused_at(&self, now: DateTime<Utc>) -> bool {
        match self.policy.best_available_only {
            BestAvailableOnly::Never => false,
            BestAvailableOnly::OnSaleWindow => self.in_on_sale_window(now),
            BestAvailableOnly::Always => true,
        }
    }

    /// Seats (and general-admission units) one account may hold and have ordered at once.
    pub fn seat_cap(&self) -> u32 {
        self.policy
            .max_seats_per_account
            .unwrap_or(MAX_SEATS_PER_ACCOUNT)
    }
}

/// When explicit seat picks are refused, so fans stop racing for the same seats: the show
/// hands out the best available instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BestAvailableOnly {
    #[default]
    Never,
    /// During the on-sale window only.
    OnSaleWindow,
    Always,
}

/// The on-sale policies of a show (the design's caps on what an admitted session can take).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SalePolicy {
    /// The hold TTL inside the on-sale window (the documents: 2 minutes while demand peaks);
    /// `None`: the show's TTL all along.
    #[serde(default)]
    pub on_sale_hold_ttl_seconds: Option<u32>,
    /// How long the on-sale window lasts from `onSaleAt`; 0: no window.
    #[serde(default)]
    pub on_sale_window_seconds: u32,
    #[serde(default)]
    pub best_available_only: BestAvailableOnly,
    /// The per-account cap of this show; `None`: [`MAX_SEATS_PER_ACCOUNT`].
    #[serde(default)]
    pub max_seats_per_account: Option<u32>,
    /// Who may join the waiting room: only accounts whose token says they are verified (the
    /// `verified` claim: an account with a payment history, checked by the identity provider).
    #[serde(default)]
    pub require_verified_account: bool,
    /// The proof of work a join must carry: a challenge whose SHA-256 with the fan's answer
    /// starts with this many zero bits (about 2^bits hashes to find, one to check); 0: none.
    #[serde(default)]
    pub join_challenge_bits: u8,
    /// Declined payments one account may have on this show within a day before its next
    /// order is refused; `None`: [`crate::show::DEFAULT_MAX_FAILED_PAYMENTS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failed_payments: Option<u32>,
}

/// The most declined payments a show may let one account have in a day.
pub const MAX_FAILED_PAYMENTS: u32 = 50;

/// The hardest join challenge a show may set: 2^28 hashes is minutes in a browser.
pub const MAX_JOIN_CHALLENGE_BITS: u8 = 28;
/// The challenge size onsale measures and recommends (BENCHMARKS: about a second of a fan's
/// device, so one machine joining with a thousand accounts spends a thousand seconds).
pub const DEFAULT_JOIN_CHALLENGE_BITS: u8 = 20;

/// The longest on-sale window: a week.
pub const MAX_ON_SALE_WINDOW_SECONDS: u32 = 7 * 24 * 3600;
/// The most seats one hold request may name.
pub const MAX_SEATS_PER_HOLD: usize = 64;
/// The highest per-account cap a show may set: what one hold request may name.
pub const MAX_SEAT_CAP: u32 = MAX_SEATS_PER_HOLD as u32;
/// The longest a hold may live (`holdTtlSeconds`, `onSaleHoldTtlSeconds`).
pub const MAX_HOLD_TTL_SECONDS: u32 = 3_600;

impl SalePolicy {
    /// Declined payments one account may have on the show within a day.
    pub fn failed_payment_cap(&self) -> u32 {
        self.max_failed_payments
            .unwrap_or(crate::show::DEFAULT_MAX_FAILED_PAYMENTS)
    }

    /// The policy's bounds, named as the API names the fields.
    pub fn check(&self) -> Result<()> {
        if let Some(n) = self.max_failed_payments {
            if n == 0 || n > MAX_FAILED_PAYMENTS {
                return Err(ShowError::Invalid(format!(
                    "maxFailedPayments must be 1 to {MAX_FAILED_PAYMENTS}"
                )));
            }
        }
        if let Some(ttl) = self.on_sale_hold_ttl_seconds {
            if ttl == 0 || ttl > MAX_HOLD_TTL_SECONDS {
                return Err(ShowError::Invalid(format!(
                    "onSaleHoldTtlSeconds must be 1 to {MAX_HOLD_TTL_SECONDS}"
                )));
            }
        }
        if self.on_sale_window_seconds > MAX_ON_SALE_WINDOW_SECONDS {
            return Err(ShowError::Invalid(format!(
                "onSaleWindowSeconds must be 0 to {MAX_ON_SALE_WINDOW_SECONDS}"
            )));
        }
        if let Some(cap) = self.max_seats_per_account {
            if cap == 0 || cap > MAX_SEAT_CAP {
                return Err(ShowError::Invalid(format!(
                    "maxSeatsPerAccount must be 1 to {MAX_SEAT_CAP}"
                )));
            }
        }
        if self.join_challenge_bits > MAX_JOIN_CHALLENGE_BITS {
            return Err(ShowError::Invalid(format!(
                "joinChallengeBits must be 0 to {MAX_JOIN_CHALLENGE_BITS}"
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ShowCommand {
    Schedule {
        info: ShowInfo,
        layout: VenueLayout,
    },
    HoldSeats {
        hold_id: HoldId,
        account: AccountId,
        seat_ids: Vec<String>,
        idempotency: Option<Idempotency>,
    },
    HoldBestAvailable {
        hold_id: HoldId,
        account: AccountId,
        quantity: u32,
        section: Option<String>,
        idempotency: Option<Idempotency>,
    },
    ReleaseHold {
        hold_id: HoldId,
        account: AccountId,
    },
    /// The card's token is not part of the command nor of the log: the edge keeps it, under
    /// the order id, where only the payment worker reads it (`payment_tokens`, issue 16).
    PlaceOrder {
        order_id: OrderId,
        hold_id: HoldId,
        account: AccountId,
        idempotency: Idempotency,
    },
    /// A capture: `amount_cents` is what the processor reports captured when it reports it
    /// (a webhook, a settlement line); an amount other than the order's total is refused.
    RecordPaymentSucceeded {
        order_id: OrderId,
        #[serde(default)]
        amount_cents: Option<i64>,
    },
    RecordPaymentFailed {
        order_id: OrderId,
        #[serde(default)]
        code: PaymentFailure,
        reason: String,
    },
    RecordPaymentAmbiguous {
        order_id: OrderId,
        reason: String,
    },
    CompensateOrder {
        order_id: OrderId,
    },
    /// The buyer (or an admin) cancels a paid order: its seats go back on sale and a refund is
    /// owed. The edge revokes the order's tickets before it sends this.
    CancelOrder {
        order_id: OrderId,
        account: AccountId,
        admin: bool,
    },
    /// The processor refunded the order (a cancellation or a make-good).
    RecordRefund {
        order_id: OrderId,
        refund_id: String,
    },
    /// The sweeper's command: each hold is expired only if it is still that hold, still active
    /// and past its expiry, so a late sweep can never release somebody else's newer hold.
    ExpireHolds {
        hold_ids: Vec<HoldId>,
    },
    /// The admin changes the on-sale policies (and the show's hold TTL): from the next
    /// command on; holds already made keep their expiry.
    SetSalePolicy {
        hold_ttl_seconds: u32,
        policy: SalePolicy,
    },
}

/// Who made an event happen: an account (a fan, or the admin who cancelled), or the part of
/// onsale or the card processor that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Account(AccountId),
    System(&'static str),
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Account(a) => a.fmt(f),
            Self::System(s) => f.write_str(s),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ShowEvent {
    ShowScheduled {
        info: ShowInfo,
        layout: VenueLayout,
    },
    SeatsHeld {
        hold_id: HoldId,
        account_id: AccountId,
        seat_ids: Vec<SeatId>,
        expires_at: DateTime<Utc>,
        best_available: bool,
        idempotency: Option<Idempotency>,
    },
    HoldReleased {
        hold_id: HoldId,
    },
    HoldExpired {
        hold_id: HoldId,
    },
    OrderPlaced {
        order_id: OrderId,
        hold_id: HoldId,
        account_id: AccountId,
        seat_ids: Vec<SeatId>,
        total_cents: i64,
        // Orders placed before issue 16 carried `payment_token` here; it is ignored when read.
        placed_at: DateTime<Utc>,
        idempotency: Idempotency,
    },
    PaymentSucceeded {
        order_id: OrderId,
        at: DateTime<Utc>,
    },
    PaymentFailed {
        order_id: OrderId,
        #[serde(default)]
        code: PaymentFailure,
        reason: String,
        at: DateTime<Utc>,
    },
    PaymentAmbiguous {
        order_id: OrderId,
        reason: String,
        at: DateTime<Utc>,
    },
    OrderCompensated {
        order_id: OrderId,
        seat_ids: Vec<SeatId>,
        at: DateTime<Utc>,
    },
    /// A capture arrived after the order had failed, and its seats were still free: they are
    /// sold to the order that paid for them (ADR 006).
    OrderReinstated {
        order_id: OrderId,
        seat_ids: Vec<SeatId>,
        at: DateTime<Utc>,
    },
    /// A capture arrived after the order had failed, and somebody else has (some of) its seats
    /// now: they are not taken back; the charge is refunded and the buyer owed a make-good.
    MakeGoodOwed {
        order_id: OrderId,
        taken_seat_ids: Vec<SeatId>,
        /// Why the seats could not go back to the order: taken by others, or the buyer's
        /// per-account cap is full with what they bought since.
        #[serde(default)]
        reason: String,
        at: DateTime<Utc>,
    },
    OrderCancelled {
        order_id: OrderId,
        seat_ids: Vec<SeatId>,
        by: AccountId,
        at: DateTime<Utc>,
    },
    OrderRefunded {
        order_id: OrderId,
        refund_id: String,
        at: DateTime<Utc>,
    },
    /// The admin changed the on-sale policies; they apply to what is decided after.
    SalePolicyChanged {
        hold_ttl_seconds: u32,
        policy: SalePolicy,
        at: DateTime<Utc>,
    },
}

impl DomainEvent for ShowEvent {
    fn event_type(&self) -> String {
        match self {
            Self::ShowScheduled { .. } => "ShowScheduled",
            Self::SeatsHeld { .. } => "SeatsHeld",
            Self::HoldReleased { .. } => "HoldReleased",
            Self::HoldExpired { .. } => "HoldExpired",
            Self::OrderPlaced { .. } => "OrderPlaced",
            Self::PaymentSucceeded { .. } => "PaymentSucceeded",
            Self::PaymentFailed { .. } => "PaymentFailed",
            Self::PaymentAmbiguous { .. } => "PaymentAmbiguous",
            Self::OrderCompensated { .. } => "OrderCompensated",
            Self::OrderReinstated { .. } => "OrderReinstated",
            Self::MakeGoodOwed { .. } => "MakeGoodOwed",
            Self::OrderCancelled { .. } => "OrderCancelled",
            Self::OrderRefunded { .. } => "OrderRefunded",
            Self::SalePolicyChanged { .. } => "SalePolicyChanged",
        }
        .to_owned()
    }
    fn event_version(&self) -> String {
        "1".to_owned()
    }
}

impl ShowEvent {
    /// The order the event is about, if any.
    pub fn order_id(&self) -> Option<OrderId> {
        match self {
            Self::OrderPlaced { order_id, .. }
            | Self::PaymentSucceeded { order_id, .. }
            | Self::PaymentFailed { order_id, .. }
            | Self::PaymentAmbiguous { order_id, .. }
            | Self::OrderCompensated { order_id, .. }
            | Self::OrderReinstated { order_id, .. }
            | Self::MakeGoodOwed { order_id, .. }
            | Self::OrderCancelled { order_id, .. }
            | Self::OrderRefunded { order_id, .. } => Some(*order_id),
            Self::ShowScheduled { .. }
            | Self::SeatsHeld { .. }
            | Self::HoldReleased { .. }
            | Self::HoldExpired { .. }
            | Self::SalePolicyChanged { .. } => None,
        }
    }

    /// The hold the event is about, if it names one.
    /// Who made the event happen: `account` is the account of the event's hold or order (a
    /// release names only its hold, so the caller looks it up); `None` when that is needed
    /// and not known.
    pub fn actor(&self, account: Option<&AccountId>) -> Option<Actor> {
        let system = |s: &'static str| Some(Actor::System(s));
        match self {
            Self::ShowScheduled { .. } | Self::SalePolicyChanged { .. } => system("onsale:catalog"),
            Self::SeatsHeld { account_id, .. } | Self::OrderPlaced { account_id, .. } => {
                Some(Actor::Account(account_id.clone()))
            }
            Self::HoldReleased { .. } => account.cloned().map(Actor::Account),
            Self::HoldExpired { .. } => system("onsale:expiry"),
            Self::PaymentSucceeded { .. }
            | Self::PaymentFailed { .. }
            | Self::OrderReinstated { .. }
            | Self::OrderRefunded { .. } => system("processor"),
            Self::PaymentAmbiguous { .. }
            | Self::OrderCompensated { .. }
            | Self::MakeGoodOwed { .. } => system("onsale:payments"),
            Self::OrderCancelled { by, .. } => Some(Actor::Account(by.clone())),
        }
    }

    pub fn hold_id(&self) -> Option<HoldId> {
        match self {
            Self::SeatsHeld { hold_id, .. }
            | Self::HoldReleased { hold_id }
            | Self::HoldExpired { hold_id }
            | Self::OrderPlaced { hold_id, .. } => Some(*hold_id),
            _ => None,
        }
    }
}
