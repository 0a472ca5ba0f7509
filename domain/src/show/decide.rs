//! The rules: `decide` checks everything a command asks before it emits an event.

use super::*;

impl Show {
    /// The whole rule book: what this command does to this show at `now`, as events.
    /// Nothing is emitted unless the whole command is valid. One function per command below.
    pub fn decide(&self, command: ShowCommand, now: DateTime<Utc>) -> Result<Vec<ShowEvent>> {
        if let ShowCommand::Schedule { info, layout } = command {
            return self.schedule(info, layout);
        }
        let info = self.info.as_ref().ok_or(ShowError::ShowNotFound)?;
        match command {
            ShowCommand::Schedule { .. } => Err(ShowError::ShowAlreadyExists),
            ShowCommand::HoldSeats {
                hold_id,
                account,
                seat_ids,
                idempotency,
            } => self.hold_seats(info, hold_id, account, &seat_ids, idempotency, now),
            ShowCommand::HoldBestAvailable {
                hold_id,
                account,
                quantity,
                section,
                idempotency,
            } => {
                let wanted = (quantity, section);
                self.hold_best_available(info, hold_id, account, wanted, idempotency, now)
            }
            ShowCommand::ReleaseHold { hold_id, account } => self.release_hold(hold_id, &account),
            ShowCommand::PlaceOrder {
                order_id,
                hold_id,
                account,
                idempotency,
            } => self.place_order(info, order_id, hold_id, account, idempotency, now),
            ShowCommand::RecordPaymentSucceeded {
                order_id,
                amount_cents,
            } => self.payment_succeeded(order_id, amount_cents, now),
            ShowCommand::RecordPaymentFailed {
                order_id,
                code,
                reason,
            } => self.payment_failed(order_id, code, reason, now),
            ShowCommand::RecordPaymentAmbiguous { order_id, reason } => {
                self.order_move(&order_id, OrderMove::Ambiguous, "payment ambiguous", || {
                    ShowEvent::PaymentAmbiguous {
                        order_id,
                        reason,
                        at: now,
                    }
                })
            }
            ShowCommand::CompensateOrder { order_id } => self.compensate(order_id, now),
            ShowCommand::CancelOrder {
                order_id,
                account,
                admin,
            } => self.cancel_order(order_id, account, admin, now),
            ShowCommand::RecordRefund {
                order_id,
                refund_id,
            } => self.order_move(&order_id, OrderMove::Refund, "refund", || {
                ShowEvent::OrderRefunded {
                    order_id,
                    refund_id,
                    at: now,
                }
            }),
            ShowCommand::SetSalePolicy {
                hold_ttl_seconds,
                policy,
            } => Self::set_sale_policy(info, hold_ttl_seconds, policy, now),
            ShowCommand::ExpireHolds { hold_ids } => Ok(self.expire_holds(hold_ids, now)),
        }
    }

    /// Named seats, each free now, none on a floor, within the account's cap.
    fn hold_seats(
        &self,
        info: &ShowInfo,
        hold_id: HoldId,
        account: AccountId,
        seat_ids: &[String],
        idempotency: Option<Idempotency>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        if let Some(replay) = self.replayed(&account, idempotency.as_ref(), Kind::Hold)? {
            return Ok(replay);
        }
        self.open_for_sale(info, now)?;
        if info.picks_refused_at(now) {
            return Err(ShowError::BestAvailableOnly);
        }
        let mut seen = BTreeSet::new();
        let wanted: Vec<&String> = seat_ids.iter().filter(|s| seen.insert(*s)).collect();
        if wanted.is_empty() {
            return Err(ShowError::Invalid("seatIds must not be empty".into()));
        }
        let unknown: Vec<String> = wanted
            .iter()
            .filter(|s| !self.index.seat_by_id.contains_key(s.as_str()))
            .map(|s| (*s).clone())
            .collect();
        if !unknown.is_empty() {
            return Err(ShowError::UnknownSeat(unknown));
        }
        let seats: Vec<u32> = wanted
            .iter()
            .map(|s| self.index.seat_by_id[s.as_str()])
            .collect();
        if let Some(&unit) = seats
            .iter()
            .find(|&&i| self.index.row_ga[self.index.seat_row[i as usize] as usize])
        {
            let row = self.index.rows[self.index.seat_row[unit as usize] as usize];
            let name = &self.layout.sections()[row.section as usize].section;
            return Err(ShowError::GeneralAdmission(name.clone()));
        }
        self.check_cap(info, &account, seats.len(), now)?;
        let lost: Vec<String> = seats
            .iter()
            .filter(|&&i| !self.is_free(i, now))
            .map(|&i| self.index.seat_names[i as usize].to_string())
            .collect();
        if !lost.is_empty() {
            return Err(ShowError::SeatUnavailable { lost });
        }
        self.acquire(hold_id, account, seats, false, idempotency, info, now)
    }

    /// `quantity` seats the show picks (in `section` if named), within the account's cap.
    fn hold_best_available(
        &self,
        info: &ShowInfo,
        hold_id: HoldId,
        account: AccountId,
        (quantity, section): (u32, Option<String>),
        idempotency: Option<Idempotency>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        if let Some(replay) = self.replayed(&account, idempotency.as_ref(), Kind::Hold)? {
            return Ok(replay);
        }
        self.open_for_sale(info, now)?;
        if quantity == 0 {
            return Err(ShowError::Invalid("quantity must be at least 1".into()));
        }
        let section = match section {
            Some(name) => Some(
                *self
                    .index
                    .section_by_name
                    .get(&name)
                    .ok_or(ShowError::UnknownSection(name))?,
            ),
            None => None,
        };
        self.check_cap(info, &account, quantity as usize, now)?;
        let seats = self
            .best_available(quantity, section, now)
            .ok_or(ShowError::SeatUnavailable { lost: Vec::new() })?;
        self.acquire(hold_id, account, seats, true, idempotency, info, now)
    }

    fn release_hold(&self, hold_id: HoldId, account: &AccountId) -> Result<Vec<ShowEvent>> {
        let hold = self.own_hold(&hold_id, account)?;
        match hold.state.verdict(HoldMove::Release) {
            Verdict::To(_) => Ok(vec![ShowEvent::HoldReleased { hold_id }]),
            Verdict::Already => Ok(Vec::new()),
            Verdict::Refused => Err(match hold.order {
                Some(order) => ShowError::HoldOrdered(order),
                None => refused("hold", hold.state.name(), "release"),
            }),
        }
    }

    /// An order of the account's own active hold, priced from its seats.
    fn place_order(
        &self,
        info: &ShowInfo,
        order_id: OrderId,
        hold_id: HoldId,
        account: AccountId,
        idempotency: Idempotency,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        if let Some(replay) = self.replayed(&account, Some(&idempotency), Kind::Order)? {
            return Ok(replay);
        }
        let hold = self.own_hold(&hold_id, &account)?;
        if let Some(order) = hold.order {
            return Err(ShowError::HoldOrdered(order));
        }
        self.check_failed_payments(info, &account, now)?;
        // The fence: this hold, still active, and not past its expiry at this instant.
        if hold.state != HoldState::Active || hold.expires_at <= now {
            return Err(ShowError::HoldExpired);
        }
        if self.orders.contains_key(&order_id) {
            return Err(ShowError::Invalid("order id already used".into()));
        }
        // Prices are bounded at scheduling, so this cannot overflow; checked anyway, so
        // a show scheduled before the bound refuses rather than wraps.
        let total_cents = hold
            .seats
            .iter()
            .try_fold(0i64, |sum, &i| sum.checked_add(self.seat_price(i)))
            .ok_or_else(|| ShowError::Invalid("the order's total overflows".into()))?;
        Ok(vec![ShowEvent::OrderPlaced {
            order_id,
            hold_id,
            account_id: account,
            seat_ids: self.seat_names(&hold.seats),
            total_cents,
            placed_at: now,
            idempotency,
        }])
    }

    fn payment_succeeded(
        &self,
        order_id: OrderId,
        amount_cents: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        let order = self.orders.get(&order_id).ok_or(ShowError::OrderNotFound)?;
        if let Some(reported) = amount_cents.filter(|a| *a != order.total_cents) {
            return Err(ShowError::AmountMismatch {
                expected: order.total_cents,
                reported,
            });
        }
        if matches!(order.state, OrderState::PaymentFailed | OrderState::Failed) {
            return Ok(self.late_capture(order_id, order, now));
        }
        self.order_move(&order_id, OrderMove::Succeed, "payment succeeded", || {
            ShowEvent::PaymentSucceeded { order_id, at: now }
        })
    }

    fn payment_failed(
        &self,
        order_id: OrderId,
        code: PaymentFailure,
        reason: String,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        let order = self.orders.get(&order_id).ok_or(ShowError::OrderNotFound)?;
        let mut events = self.order_move(&order_id, OrderMove::Fail, "payment failed", || {
            ShowEvent::PaymentFailed {
                order_id,
                code,
                reason,
                at: now,
            }
        })?;
        // A definitive failure returns the seats in the same commit, guarded on the
        // order: no window where a declined order still blocks them.
        if matches!(
            order.state,
            OrderState::PendingPayment | OrderState::PaymentFailed
        ) {
            events.push(ShowEvent::OrderCompensated {
                order_id,
                seat_ids: self.seat_names(&order.seats),
                at: now,
            });
        }
        Ok(events)
    }

    fn compensate(&self, order_id: OrderId, now: DateTime<Utc>) -> Result<Vec<ShowEvent>> {
        let seat_ids = self
            .orders
            .get(&order_id)
            .map(|o| self.seat_names(&o.seats))
            .unwrap_or_default();
        self.order_move(&order_id, OrderMove::Compensate, "compensation", || {
            ShowEvent::OrderCompensated {
                order_id,
                seat_ids,
                at: now,
            }
        })
    }

    fn cancel_order(
        &self,
        order_id: OrderId,
        account: AccountId,
        admin: bool,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        let order = self.cancellable(&order_id, &account, admin)?;
        match order.state.verdict(OrderMove::Cancel) {
            Verdict::To(_) => Ok(vec![ShowEvent::OrderCancelled {
                order_id,
                seat_ids: self.seat_names(&order.seats),
                by: account,
                at: now,
            }]),
            Verdict::Already | Verdict::Refused => Ok(Vec::new()),
        }
    }

    fn set_sale_policy(
        info: &ShowInfo,
        hold_ttl_seconds: u32,
        policy: SalePolicy,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        check_ttl(hold_ttl_seconds)?;
        policy.check()?;
        if info.hold_ttl_seconds == hold_ttl_seconds && info.policy == policy {
            return Ok(Vec::new());
        }
        Ok(vec![ShowEvent::SalePolicyChanged {
            hold_ttl_seconds,
            policy,
            at: now,
        }])
    }

    /// Of `hold_ids`, each once, those that may expire and have lapsed by `now`.
    fn expire_holds(&self, hold_ids: Vec<HoldId>, now: DateTime<Utc>) -> Vec<ShowEvent> {
        let mut seen = BTreeSet::new();
        hold_ids
            .into_iter()
            .filter(|h| seen.insert(*h))
            .filter(|h| {
                self.holds.get(h).is_some_and(|hold| {
                    matches!(hold.state.verdict(HoldMove::Expire), Verdict::To(_))
                        && hold.expires_at <= super::views::lapsed_by(now)
                })
            })
            .map(|hold_id| ShowEvent::HoldExpired { hold_id })
            .collect()
    }

    fn schedule(&self, info: ShowInfo, layout: VenueLayout) -> Result<Vec<ShowEvent>> {
        if self.info.is_some() {
            return Err(ShowError::ShowAlreadyExists);
        }
        for tier in layout.price_tiers() {
            match info.prices.get(tier) {
                Some(&cents) if (0..=MAX_PRICE_CENTS).contains(&cents) => {}
                Some(_) => {
                    return Err(ShowError::Invalid(format!(
                        "price of tier {tier} must be 0 to {MAX_PRICE_CENTS} cents"
                    )))
                }
                None => return Err(ShowError::Invalid(format!("no price for tier {tier}"))),
            }
        }
        check_ttl(info.hold_ttl_seconds)?;
        info.policy.check()?;
        if info.on_sale_at >= info.starts_at {
            return Err(ShowError::Invalid(
                "onSaleAt must be before startsAt".into(),
            ));
        }
        Ok(vec![ShowEvent::ShowScheduled { info, layout }])
    }

    fn open_for_sale(&self, info: &ShowInfo, now: DateTime<Utc>) -> Result<()> {
        if now < info.on_sale_at {
            return Err(ShowError::SaleNotOpen);
        }
        if now >= info.starts_at {
            return Err(ShowError::SaleClosed);
        }
        Ok(())
    }

    /// `Some(no events)` when this request was already answered under its key; an error when
    /// the key was used for a different request.
    fn replayed(
        &self,
        account: &AccountId,
        idempotency: Option<&Idempotency>,
        kind: Kind,
    ) -> Result<Option<Vec<ShowEvent>>> {
        let Some(idem) = idempotency else {
            return Ok(None);
        };
        let Some(record) = self.idempotency.get(&(account.clone(), idem.key.clone())) else {
            return Ok(None);
        };
        let same_kind = matches!(
            (kind, record.outcome),
            (Kind::Hold, Outcome::Hold(_)) | (Kind::Order, Outcome::Order(_))
        );
        if same_kind && record.fingerprint == idem.fingerprint {
            Ok(Some(Vec::new()))
        } else {
            Err(ShowError::IdempotencyKeyReused)
        }
    }

    /// Card testing stops here: an account with as many declined payments on this show in
    /// the last day as the policy allows places no order until the oldest of them is a day
    /// old (when the show forgets it).
    fn check_failed_payments(
        &self,
        info: &ShowInfo,
        account: &AccountId,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let horizon = now - Duration::hours(IDEMPOTENCY_KEY_HOURS);
        let declined: Vec<DateTime<Utc>> = self
            .orders_of(account)
            .filter(|o| o.declined() && o.placed_at > horizon)
            .map(|o| o.placed_at)
            .collect();
        let limit = info.policy.failed_payment_cap();
        if declined.len() < limit as usize {
            return Ok(());
        }
        let oldest = declined.into_iter().min().unwrap_or(now);
        let wait = (oldest + Duration::hours(IDEMPOTENCY_KEY_HOURS) - now).num_seconds();
        Err(ShowError::PaymentAttemptsExceeded {
            limit,
            retry_after_secs: u64::try_from(wait).unwrap_or(0).max(1),
        })
    }

    fn check_cap(
        &self,
        info: &ShowInfo,
        account: &AccountId,
        wanted: usize,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let already = self.seats_claimed_by(account, now);
        let limit = info.seat_cap();
        if u64::from(already) + wanted as u64 > u64::from(limit) {
            return Err(ShowError::HoldLimit { limit, already });
        }
        Ok(())
    }

    fn own_hold(&self, hold_id: &HoldId, account: &AccountId) -> Result<&Hold> {
        // Someone else's hold answers exactly like a missing one.
        self.holds
            .get(hold_id)
            .filter(|h| &h.account == account)
            .ok_or(ShowError::HoldNotFound)
    }

    fn order_move(
        &self,
        order_id: &OrderId,
        by: OrderMove,
        what: &'static str,
        event: impl FnOnce() -> ShowEvent,
    ) -> Result<Vec<ShowEvent>> {
        let order = self.orders.get(order_id).ok_or(ShowError::OrderNotFound)?;
        match order.state.verdict(by) {
            Verdict::To(_) => Ok(vec![event()]),
            Verdict::Already => Ok(Vec::new()),
            Verdict::Refused => Err(refused("order", order.state.name(), what)),
        }
    }

    /// The late-success policy (ADR 006): a capture for an order that already failed. Its seats
    /// are sold to it again if every one is still free (lapsed holds on them end first);
    /// otherwise nobody loses a seat they now hold or bought (and nobody ends up above the
    /// per-account cap): the order owes a refund and a make-good.
    fn late_capture(&self, order_id: OrderId, order: &Order, now: DateTime<Utc>) -> Vec<ShowEvent> {
        let mut lapsed = BTreeSet::new();
        let mut taken = Vec::new();
        for &i in &order.seats {
            match self.seats[i as usize] {
                Seat::Available => {}
                Seat::PendingPayment(o) if o == order_id => {}
                Seat::Held(h) if self.holds.get(&h).is_some_and(|h| h.expires_at <= now) => {
                    lapsed.insert(h);
                }
                _ => taken.push(i),
            }
        }
        if !taken.is_empty() {
            return vec![ShowEvent::MakeGoodOwed {
                order_id,
                taken_seat_ids: self.seat_names(&taken),
                reason: "its seats went to somebody else".into(),
                at: now,
            }];
        }
        // The cap holds for reinstated orders too: a fan who bought other seats since is not
        // handed more than the cap allows.
        let own = if order.state.claims_seats() {
            order.seats.len()
        } else {
            0
        };
        let claimed = self.seats_claimed_by(&order.account, now) as usize - own;
        let cap = self
            .info
            .as_ref()
            .map_or(MAX_SEATS_PER_ACCOUNT, ShowInfo::seat_cap);
        if claimed + order.seats.len() > cap as usize {
            return vec![ShowEvent::MakeGoodOwed {
                order_id,
                taken_seat_ids: Vec::new(),
                reason: "the buyer's per-account limit is full with seats bought since".into(),
                at: now,
            }];
        }
        let mut events: Vec<ShowEvent> = lapsed
            .into_iter()
            .map(|hold_id| ShowEvent::HoldExpired { hold_id })
            .collect();
        events.push(ShowEvent::OrderReinstated {
            order_id,
            seat_ids: self.seat_names(&order.seats),
            at: now,
        });
        events
    }

    /// A seat may be taken now: available, or held by a hold whose expiry has passed (the
    /// acquire reclaims it, so no reaper sits on the write path).
    fn is_free(&self, seat: u32, now: DateTime<Utc>) -> bool {
        match &self.seats[seat as usize] {
            Seat::Available => true,
            Seat::Held(h) => self.holds.get(h).is_some_and(|h| h.expires_at <= now),
            Seat::PendingPayment(_) | Seat::Sold(_) => false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        hold_id: HoldId,
        account: AccountId,
        seats: Vec<u32>,
        best_available: bool,
        idempotency: Option<Idempotency>,
        info: &ShowInfo,
        now: DateTime<Utc>,
    ) -> Result<Vec<ShowEvent>> {
        if self.holds.contains_key(&hold_id) {
            return Err(ShowError::Invalid("hold id already used".into()));
        }
        // Lapsed holds on the wanted seats end first, visibly, then the new hold takes them.
        let mut lapsed = BTreeSet::new();
        for &i in &seats {
            if let Seat::Held(h) = self.seats[i as usize] {
                lapsed.insert(h);
            }
        }
        let mut events: Vec<ShowEvent> = lapsed
            .into_iter()
            .map(|hold_id| ShowEvent::HoldExpired { hold_id })
            .collect();
        events.push(ShowEvent::SeatsHeld {
            hold_id,
            account_id: account,
            seat_ids: self.seat_names(&seats),
            expires_at: now + Duration::seconds(i64::from(info.hold_ttl_at(now))),
            best_available,
            idempotency,
        });
        Ok(events)
    }

    /// Best available: the first run of `quantity` adjacent free seats in one row, walking
    /// sections and rows in layout order (best first); failing that, the first free seats.
    fn best_available(
        &self,
        quantity: u32,
        section: Option<u32>,
        now: DateTime<Utc>,
    ) -> Option<Vec<u32>> {
        let rows = match section {
            Some(s) => self.index.section_rows[s as usize].clone(),
            None => 0..self.index.rows.len() as u32,
        };
        // Asked for no section, the best available are seats: general admission is sold
        // only when asked for by its section.
        let in_scope = |r: &u32| section.is_some() || !self.index.row_ga[*r as usize];
        // Whether row `r` has at least `need` seats free now (available, or of lapsed holds).
        let has_free = |r: u32, need: u32| {
            let r = r as usize;
            let mut free = self.index.row_available[r];
            for (_, n) in self.index.row_holds[r].range(..=now) {
                if free >= need {
                    break;
                }
                free += n;
            }
            free >= need
        };
        for r in rows.clone().filter(in_scope) {
            if !has_free(r, quantity) {
                continue;
            }
            let span = self.index.rows[r as usize];
            let mut run = 0;
            for i in span.start..span.start + span.len {
                if self.is_free(i, now) {
                    run += 1;
                    if run == quantity {
                        return Some((i + 1 - quantity..=i).collect());
                    }
                } else {
                    run = 0;
                }
            }
        }
        let mut picked = Vec::new();
        for r in rows.filter(in_scope) {
            if !has_free(r, 1) {
                continue;
            }
            let span = self.index.rows[r as usize];
            for i in span.start..span.start + span.len {
                if self.is_free(i, now) {
                    picked.push(i);
                    if picked.len() == quantity as usize {
                        return Some(picked);
                    }
                }
            }
        }
        None
    }

    fn seat_price(&self, seat: u32) -> i64 {
        let row = self.index.seat_row[seat as usize];
        self.index.section_price[self.index.rows[row as usize].section as usize]
    }

    pub(super) fn seat_indices<S: AsRef<str>>(&self, ids: &[S]) -> Vec<u32> {
        ids.iter()
            .filter_map(|s| self.index.seat_by_id.get(s.as_ref()).copied())
            .collect()
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Hold,
    Order,
}

fn refused(entity: &'static str, from: &'static str, by: &'static str) -> ShowError {
    ShowError::InvalidTransition {
        entity: entity.into(),
        from: from.into(),
        by: by.into(),
    }
}

fn check_ttl(seconds: u32) -> Result<()> {
    use super::messages::MAX_HOLD_TTL_SECONDS;
    if seconds == 0 || seconds > MAX_HOLD_TTL_SECONDS {
        return Err(ShowError::Invalid(format!(
            "holdTtlSeconds must be 1 to {MAX_HOLD_TTL_SECONDS}"
        )));
    }
    Ok(())
}
