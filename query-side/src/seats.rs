//! What a seat map or a delta stream carries besides the section counts.

/// What a map or a stream carries besides the section counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seats {
    None,
    /// One section's seats, with their ids and statuses.
    Section(String),
    /// Every reserved seat: in a map as the sold bitmap, in a stream every changed seat.
    All,
}

impl Seats {
    /// The section asked for, if one was.
    pub fn section(&self) -> Option<&str> {
        match self {
            Seats::Section(s) => Some(s),
            Seats::None | Seats::All => None,
        }
    }

    /// The scope's part of a map's entity tag.
    pub fn tag(&self) -> &str {
        match self {
            Seats::None => "all",
            Seats::Section(s) => s,
            Seats::All => "*seats",
        }
    }
}

/// Packs `sold` (one flag per seat) into bytes, least significant bit first.
pub fn bitmap(sold: &[bool]) -> Vec<u8> {
    let mut bytes = vec![0u8; sold.len().div_ceil(8)];
    for (i, _) in sold.iter().enumerate().filter(|(_, s)| **s) {
        bytes[i / 8] |= 1 << (i % 8);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bitmap_packs_each_seat_least_significant_bit_first() {
        assert!(bitmap(&[]).is_empty());
        assert_eq!(bitmap(&[true]), [0b0000_0001]);
        let mut sold = vec![false; 10];
        sold[1] = true;
        sold[7] = true;
        sold[9] = true;
        assert_eq!(bitmap(&sold), [0b1000_0010, 0b0000_0010]);
        assert_eq!(bitmap(&[false; 16]), [0, 0]);
    }
}
