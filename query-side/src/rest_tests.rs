//! The unit tests of `rest.rs`.

use super::*;

#[test]
fn the_seats_asked_for_are_none_a_labelled_section_or_all() {
    assert_eq!(parse_seats(None, None).expect("none"), Seats::None);
    assert_eq!(
        parse_seats(Some("114"), None).expect("a section"),
        Seats::Section("114".into())
    );
    assert_eq!(
        parse_seats(Some("114"), Some(AllSeats::All)).expect("all"),
        Seats::All
    );
    assert_eq!(
        parse_seats(None, Some(AllSeats::All)).expect("all"),
        Seats::All
    );
    // A section that is no label never becomes a cache key, even beside `seats=all`.
    for bad in ["", "a b", "../x", &"s".repeat(500)] {
        let e = parse_seats(Some(bad), Some(AllSeats::All)).expect_err("refused");
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad:?}");
    }
}
