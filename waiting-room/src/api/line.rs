//! What the routes decide with: who may join, a fan's standing and ETA, a session's
//! checks.

use super::*;

/// 403 `VERIFIED_ACCOUNT_REQUIRED` for a fan whose token lacks the claim, when the show asks it.
pub(super) fn verified_if_asked(rules: &crate::JoinRules, caller: &Caller) -> Result<(), ApiError> {
    if rules.verified_only && caller.role == Role::Fan && !caller.verified {
        return Err(err(
            StatusCode::FORBIDDEN,
            ErrorCode::VerifiedAccountRequired,
            "this event's line is open to verified accounts only",
        ));
    }
    Ok(())
}

/// A fan's join under the show's rules: a verified account if it asks one, and a fresh,
/// solved challenge of at least its size if it asks one. Admins join freely (they test lines).
pub(super) async fn admit_joiner(
    state: &RoomState,
    caller: &Caller,
    show: ShowId,
    answer: Option<(String, String)>,
) -> Result<(), ApiError> {
    if caller.role == Role::Admin {
        return Ok(());
    }
    let rules = state.room.rules(show).await?;
    verified_if_asked(&rules, caller)?;
    if rules.challenge_bits == 0 {
        return Ok(());
    }
    let Some((challenge, solution)) = answer else {
        // A fan already in line (a reloaded page) keeps the place without working again.
        match state
            .room
            .store
            .standing(show, caller.account.as_str())
            .await
        {
            Ok(s) if holds_place(&state.room, &s) => return Ok(()),
            Ok(_) => {}
            Err(e) => redis_down(&e),
        }
        return Err(err(
            StatusCode::PRECONDITION_REQUIRED,
            ErrorCode::ChallengeRequired,
            "this event asks a proof of work to join: solve a challenge from GET /v1/events/{id}/waiting-room/challenge and send {challenge, solution}",
        ));
    };
    let invalid = || {
        err(
            StatusCode::FORBIDDEN,
            ErrorCode::ChallengeInvalid,
            "the challenge is not one of ours, has expired, is another account's or event's, or is smaller than the event asks now: ask another",
        )
    };
    let claims = state
        .room
        .signer
        .verify::<ChallengeClaims>(
            &challenge,
            challenge::CHALLENGE,
            caller.account.as_str(),
            &show.to_string(),
        )
        .map_err(|_| invalid())?;
    if claims.bits < rules.challenge_bits {
        return Err(invalid());
    }
    // One hash, whatever the size: what it costs the server does not grow with the work.
    if !challenge::solves(&challenge, &solution, claims.bits) {
        return Err(err(
            StatusCode::FORBIDDEN,
            ErrorCode::ChallengeNotSolved,
            "the solution does not solve the challenge",
        ));
    }
    match state
        .room
        .store
        .spend_challenge(show, &claims.nonce, claims.exp * 1000)
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => Err(err(
            StatusCode::CONFLICT,
            ErrorCode::ChallengeReused,
            "this challenge was used already: ask another",
        )),
        // Redis away: the line runs in fallback (no positions to win), and the challenge is
        // bound to this account and show; it is let through rather than stopping every join.
        Err(e) => {
            redis_down(&e);
            Ok(())
        }
    }
}

pub(super) async fn join_line(
    state: &RoomState,
    show: ShowId,
    account: &str,
    facts: crate::ShowFacts,
) -> redis::RedisResult<(Option<i64>, Option<f64>)> {
    let room = &state.room;
    room.store
        .register(
            show,
            facts.on_sale_at.timestamp_millis(),
            facts.starts_at.timestamp_millis(),
        )
        .await?;
    let standing = room.store.standing(show, account).await?;
    if holds_place(room, &standing) {
        return Ok((standing.position, fan_eta(&standing)));
    }
    let requeue = standing.position.is_some();
    let candidate = room
        .candidate(show, facts.on_sale_at.timestamp_millis())
        .await?;
    let lottery: u64 = rand::rng().random_range(0..(1u64 << 52));
    let pos = room
        .store
        .join(show, account, candidate, lottery, requeue)
        .await?;
    let standing = room.store.standing(show, account).await?;
    Ok(((pos > 0).then_some(pos), fan_eta(&standing)))
}

/// Whether the account has a place in the line that still counts: an admission whose window
/// lapsed is void, and the fan goes to the back (design.md §7.2).
pub(super) fn holds_place(room: &WaitingRoom, s: &crate::store::Standing) -> bool {
    let lapsed = s.passed_at_ms.is_some_and(|t| {
        now_ms() > t + room.grace().as_millis() as i64 + (s.paused_ms - s.paused_at_pass_ms)
    });
    s.position.is_some() && !lapsed
}

pub(super) fn fan_eta(s: &crate::store::Standing) -> Option<f64> {
    let pos = s.position?;
    let ahead = (pos - s.admitted_through).max(0) as u64;
    let last = s
        .last_eta
        .map(|(told, at)| (told, (now_ms() - at) as f64 / 1000.0));
    eta::eta(ahead, s.rate, last).map(|e| (e * 10.0).round() / 10.0)
}

/// "no seats and no live holds" versus "seats may come back" (design.md §7.10); read
/// at most once a second per show.
pub(super) async fn availability(state: &RoomState, show: ShowId) -> Availability {
    let pool = state.room.pool.clone();
    state
        .availability
        .get_with(
            show,
            async move { crate::sale::availability(&pool, show).await },
        )
        .await
}

/// The fan's view: position, the line, an ETA that never grows, and the admission token once
/// the line has passed the position.
pub(super) async fn status(
    state: &RoomState,
    show: ShowId,
    account: &str,
) -> Result<Standing, ApiError> {
    let room = &state.room;
    let availability = availability(state, show).await;
    let standing = match room.store.standing(show, account).await {
        Ok(s) => s,
        Err(e) => {
            redis_down(&e);
            // One admission per account and show, at the fallback's pace.
            let admission = room.fallback_admission(show, account, || {
                let enter_by = now_ms() + room.grace().as_millis() as i64;
                let token = room.signer.sign(&AdmissionClaims {
                    aud: tokens::ADMISSION.into(),
                    sub: account.to_owned(),
                    show: show.to_string(),
                    pos: 0,
                    jti: crate::fallback::new_id(),
                    exp_ms: enter_by,
                    paused_ms: 0,
                    exp: Utc::now().timestamp() + 24 * 3600,
                    fallback: true,
                });
                (token, enter_by)
            });
            if let Some((token, enter_by)) = admission {
                return Ok(Standing {
                    mode: Some(LineMode::Fallback),
                    admission_token: Some(token),
                    enter_by: Some(ms_to_time(enter_by)),
                    ..Standing::new(LineStatus::Admitted, availability)
                });
            }
            return Ok(Standing {
                mode: Some(LineMode::Fallback),
                ..Standing::new(LineStatus::Waiting, availability)
            });
        }
    };
    let Some(position) = standing.position else {
        return Ok(Standing {
            admitted_through: Some(standing.admitted_through),
            ..Standing::new(LineStatus::PreQueue, availability)
        });
    };
    if let Some(passed) = standing.passed_at_ms {
        let grace = room.grace().as_millis() as i64;
        let deadline = passed + grace + (standing.paused_ms - standing.paused_at_pass_ms);
        if now_ms() > deadline {
            return Ok(Standing {
                position: Some(position),
                admitted_through: Some(standing.admitted_through),
                detail: Some(
                    "the grace window passed; join again to go to the back of the line".into(),
                ),
                ..Standing::new(LineStatus::Expired, availability)
            });
        }
        let token = room.signer.sign(&AdmissionClaims {
            aud: tokens::ADMISSION.into(),
            sub: account.to_owned(),
            show: show.to_string(),
            pos: position as u64,
            jti: format!("{account}:{position}"),
            exp_ms: passed + grace,
            paused_ms: standing.paused_at_pass_ms,
            exp: Utc::now().timestamp() + 24 * 3600,
            fallback: false,
        });
        return Ok(Standing {
            position: Some(position),
            admitted_through: Some(standing.admitted_through),
            admission_token: Some(token),
            enter_by: Some(ms_to_time(deadline)),
            ..Standing::new(LineStatus::Admitted, availability)
        });
    }
    let eta = fan_eta(&standing);
    if let Some(e) = eta {
        if let Err(err) = room.store.remember_eta(show, account, e, now_ms()).await {
            redis_down(&err);
        }
    }
    Ok(Standing {
        position: Some(position),
        admitted_through: Some(standing.admitted_through),
        eta,
        ..Standing::new(LineStatus::Waiting, availability)
    })
}

pub(super) fn session(
    room: &WaitingRoom,
    account: &str,
    show: ShowId,
    sid: &str,
    lease_ms: i64,
    fallback: bool,
) -> String {
    room.signer.sign(&SessionClaims {
        aud: tokens::SESSION.into(),
        sub: account.to_owned(),
        show: show.to_string(),
        sid: sid.to_owned(),
        lease_ms,
        exp: Utc::now().timestamp() + 6 * 3600,
        fallback,
    })
}

/// The caller's own session of this show's waiting room, from its token.
pub(super) async fn own_session(
    state: &RoomState,
    id: &str,
    caller: &Caller,
    token: &str,
) -> Result<(ShowId, String, SessionClaims), ApiError> {
    let (show, _) = show_with_room(state, id).await?;
    let account = caller.account.to_string();
    let claims = state
        .room
        .signer
        .verify(token, tokens::SESSION, &account, &show.to_string())
        .map_err(|_| {
            err(
                StatusCode::FORBIDDEN,
                ErrorCode::InvalidSession,
                "the session is not yours, or not valid",
            )
        })?;
    Ok((show, account, claims))
}
