//! Rows of `(sequence bigint, payload json)` out of `COPY … TO STDOUT (FORMAT binary)`, as
//! the chunks arrive: how a show's events are read when it is rebuilt. The binary format
//! costs neither side an escape, and a chunk carries rows with no per-row decoding by the
//! driver (a row of the ordinary protocol costs about as much in sqlx as decoding the event).
//!
//! The format (PostgreSQL's `COPY` documentation, "Binary Format"): a signature, a flags word
//! and a header extension; then per row a field count, and per field a length and the bytes;
//! a field count of -1 ends the data. A `json` field is its text, as it was written.

use crate::{Result, StoreError};

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// What has arrived and not been read yet. Rows are read straight out of the chunk when no
/// earlier chunk left a part of one.
#[derive(Default)]
pub(crate) struct CopyRows {
    pending: Vec<u8>,
    header_read: bool,
    ended: bool,
}

impl CopyRows {
    /// Feeds the rows of `chunk` (after what earlier chunks left) to `row`, in order; keeps a
    /// row cut by the chunk's end for the next.
    pub(crate) fn feed(
        &mut self,
        chunk: &[u8],
        mut row: impl FnMut(i64, &str) -> Result<()>,
    ) -> Result<()> {
        if self.pending.is_empty() {
            let used = self.read(chunk, &mut row)?;
            self.pending.extend_from_slice(&chunk[used..]);
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(chunk);
            let used = self.read(&pending, &mut row)?;
            pending.drain(..used);
            self.pending = pending;
        }
        Ok(())
    }

    /// Whether the data ended as the format says, nothing after.
    pub(crate) fn finish(self) -> Result<()> {
        if self.ended && self.pending.is_empty() {
            Ok(())
        } else {
            Err(corrupt("the copy ended inside a row"))
        }
    }

    /// Reads every whole row of `buf`; answers how many bytes they took.
    fn read(&mut self, buf: &[u8], row: &mut impl FnMut(i64, &str) -> Result<()>) -> Result<usize> {
        let mut at = 0;
        if !self.header_read {
            let Some(fixed) = buf.get(..SIGNATURE.len() + 8) else {
                return Ok(0);
            };
            if &fixed[..SIGNATURE.len()] != SIGNATURE {
                return Err(corrupt("not a binary copy"));
            }
            let extension = be_u32(&fixed[SIGNATURE.len() + 4..]) as usize;
            at = fixed.len() + extension;
            if buf.len() < at {
                return Ok(0);
            }
            self.header_read = true;
        }
        loop {
            if self.ended {
                return match buf.len() - at {
                    0 => Ok(at),
                    _ => Err(corrupt("data after the copy's end")),
                };
            }
            let Some(count) = buf.get(at..at + 2) else {
                return Ok(at);
            };
            match i16::from_be_bytes([count[0], count[1]]) {
                -1 => {
                    self.ended = true;
                    at += 2;
                    continue;
                }
                2 => {}
                n => return Err(corrupt(&format!("a row of {n} fields, not 2"))),
            }
            let mut next = at + 2;
            let Some(sequence) = field(buf, &mut next)? else {
                return Ok(at);
            };
            let Some(payload) = field(buf, &mut next)? else {
                return Ok(at);
            };
            let sequence: [u8; 8] = sequence
                .try_into()
                .map_err(|_| corrupt("a sequence of other than 8 bytes"))?;
            let text = std::str::from_utf8(payload).map_err(|_| corrupt("a payload not UTF-8"))?;
            row(i64::from_be_bytes(sequence), text)?;
            at = next;
        }
    }
}

/// The field at `*at` (moving past it), `None` while it has not all arrived; a NULL is
/// corrupt (neither column may be NULL).
fn field<'a>(buf: &'a [u8], at: &mut usize) -> Result<Option<&'a [u8]>> {
    let Some(len) = buf.get(*at..*at + 4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    let len = usize::try_from(len).map_err(|_| corrupt("a NULL field"))?;
    let Some(bytes) = buf.get(*at + 4..*at + 4 + len) else {
        return Ok(None);
    };
    *at += 4 + len;
    Ok(Some(bytes))
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("reading the log: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A binary copy of `rows`, as PostgreSQL writes it.
    fn copy_of(rows: &[(i64, String)], extension: &[u8]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend(0u32.to_be_bytes());
        out.extend((extension.len() as u32).to_be_bytes());
        out.extend(extension);
        for (seq, text) in rows {
            out.extend(2i16.to_be_bytes());
            out.extend(8i32.to_be_bytes());
            out.extend(seq.to_be_bytes());
            out.extend((text.len() as i32).to_be_bytes());
            out.extend(text.as_bytes());
        }
        out.extend((-1i16).to_be_bytes());
        out
    }

    fn read_in(data: &[u8], cuts: &[usize]) -> Result<Vec<(i64, String)>> {
        let mut rows = CopyRows::default();
        let mut seen = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&data.len()]) {
            let cut = cut.clamp(from, data.len());
            rows.feed(&data[from..cut], |s, t| {
                seen.push((s, t.to_owned()));
                Ok(())
            })?;
            from = cut;
        }
        rows.finish()?;
        Ok(seen)
    }

    proptest! {
        /// However the chunks cut the data, every row comes out once, in order.
        #[test]
        fn rows_come_out_whole_wherever_the_chunks_are_cut(
            rows in prop::collection::vec((any::<i64>(), "[ -~é€]{0,40}"), 0..20),
            extension in prop::collection::vec(any::<u8>(), 0..6),
            mut cuts in prop::collection::vec(0usize..2_000, 0..12),
        ) {
            let data = copy_of(&rows, &extension);
            cuts.sort_unstable();
            prop_assert_eq!(read_in(&data, &cuts).expect("a whole copy reads"), rows);
        }

        /// Data cut short anywhere is refused, never read as a shorter log.
        #[test]
        fn a_copy_cut_short_is_refused(
            rows in prop::collection::vec((any::<i64>(), "[a-z]{0,10}"), 1..5),
            keep in any::<prop::sample::Index>(),
        ) {
            let data = copy_of(&rows, &[]);
            let keep = keep.index(data.len());
            prop_assert!(read_in(&data[..keep], &[]).is_err());
        }
    }

    #[test]
    fn what_is_not_two_columns_of_bigint_and_json_is_refused() {
        let mut data = copy_of(&[(1, "{}".into())], &[]);
        assert!(read_in(&data[1..], &[]).is_err(), "no signature");
        let payload = SIGNATURE.len() + 8 + 2 + 4 + 8 + 4;
        data[payload] = 0xff;
        assert!(read_in(&data, &[]).is_err(), "not UTF-8");
        let mut short = copy_of(&[(1, "{}".into())], &[]);
        short[SIGNATURE.len() + 8 + 2 + 3] = 4;
        assert!(read_in(&short, &[]).is_err(), "a sequence of 4 bytes");
        let mut three = copy_of(&[(1, "{}".into())], &[]);
        three[SIGNATURE.len() + 9] = 3;
        assert!(read_in(&three, &[]).is_err(), "three fields");
        let mut null = copy_of(&[(1, "{}".into())], &[]);
        null[SIGNATURE.len() + 8 + 2 + 4 + 8..][..4].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(read_in(&null, &[]).is_err(), "a NULL payload");
        let mut trailing = copy_of(&[(1, "{}".into())], &[]);
        trailing.push(0);
        assert!(read_in(&trailing, &[]).is_err(), "data after the end");
    }
}
