//! The challenge at join (issue 18, part 6): a hashcash-style proof of work. The server signs
//! a challenge bound to the account, the show, a random nonce, the size and a short expiry; the
//! fan's device searches for an answer whose SHA-256 with the challenge starts with `bits` zero
//! bits (about 2^bits hashes); the server checks it with one hash and one MAC, whatever the
//! size, and refuses a challenge used before (its nonce, once, in Redis). One machine joining
//! with a thousand accounts pays a thousand times what one fan pays.

use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The challenge token's audience.
pub const CHALLENGE: &str = "onsale-challenge";
/// How long a challenge may be answered: enough for a slow phone at the largest size shown to
/// fans, short enough that solved challenges cannot be stockpiled for the on-sale.
pub const CHALLENGE_TTL_SECS: i64 = 600;
/// The longest answer accepted (a counter in decimal needs at most 20 digits).
pub const MAX_SOLUTION_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChallengeClaims {
    pub aud: String,
    pub sub: String,
    pub show: String,
    /// Leading zero bits the answer's hash must have.
    pub bits: u8,
    /// 128 random bits in hex: what makes each challenge unsolved, and what a reuse is told by.
    pub nonce: String,
    pub exp: i64,
}

impl ChallengeClaims {
    pub fn new(account: &str, show: &str, bits: u8, now_secs: i64) -> Self {
        Self {
            aud: CHALLENGE.into(),
            sub: account.into(),
            show: show.into(),
            bits,
            nonce: hex::encode(rand::rng().random::<[u8; 16]>()),
            exp: now_secs + CHALLENGE_TTL_SECS,
        }
    }
}

/// SHA-256 of the challenge token, a colon and the answer.
pub fn digest(challenge: &str, solution: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(challenge.as_bytes());
    h.update(b":");
    h.update(solution.as_bytes());
    h.finalize().into()
}

/// How many zero bits the digest starts with.
pub fn leading_zero_bits(digest: &[u8; 32]) -> u32 {
    let mut n = 0;
    for b in digest {
        if *b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// Whether `solution` answers `challenge` at `bits`: one hash, whatever the size.
pub fn solves(challenge: &str, solution: &str, bits: u8) -> bool {
    solution.len() <= MAX_SOLUTION_LEN
        && !solution.is_empty()
        && solution.bytes().all(|b| b.is_ascii_alphanumeric())
        && leading_zero_bits(&digest(challenge, solution)) >= u32::from(bits)
}

/// The search a fan's device runs: counters in decimal from 0 until one answers; returns it
/// and how many hashes it took. The challenge is hashed once and its state copied for each
/// try, as any serious solver does (the web app's does too).
pub fn solve(challenge: &str, bits: u8) -> (String, u64) {
    let mut prefix = Sha256::new();
    prefix.update(challenge.as_bytes());
    prefix.update(b":");
    let mut n: u64 = 0;
    loop {
        let s = n.to_string();
        let d: [u8; 32] = prefix.clone().chain_update(s.as_bytes()).finalize().into();
        if leading_zero_bits(&d) >= u32::from(bits) {
            return (s, n + 1);
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_bits_are_counted_from_the_first_byte() {
        let mut d = [0xffu8; 32];
        assert_eq!(leading_zero_bits(&d), 0);
        d[0] = 0;
        d[1] = 0b0001_0000;
        assert_eq!(leading_zero_bits(&d), 11);
        assert_eq!(leading_zero_bits(&[0; 32]), 256);
    }

    #[test]
    fn a_solved_challenge_is_accepted_and_the_answer_binds_the_challenge() {
        let (answer, tries) = solve("challenge-a", 12);
        assert!(tries >= 1);
        assert!(solves("challenge-a", &answer, 12));
        // The same answer to another challenge is (almost surely) no answer at all.
        assert!(!solves("challenge-b", &answer, 12) || !solves("challenge-c", &answer, 12));
    }

    #[test]
    fn answers_that_are_not_short_plain_words_are_refused() {
        assert!(!solves("c", "", 0));
        assert!(!solves("c", &"1".repeat(MAX_SOLUTION_LEN + 1), 0));
        assert!(!solves("c", "12:3", 0));
        assert!(solves("c", "123", 0));
    }

    proptest! {
        /// Whatever the challenge and the size, the search's answer passes the check, and the
        /// check agrees with counting the digest's bits.
        #[test]
        fn what_the_search_finds_the_check_accepts(challenge in "[a-zA-Z0-9._-]{1,300}", bits in 0u8..10) {
            let (answer, _) = solve(&challenge, bits);
            prop_assert!(solves(&challenge, &answer, bits));
            prop_assert!(leading_zero_bits(&digest(&challenge, &answer)) >= u32::from(bits));
        }
    }
}
