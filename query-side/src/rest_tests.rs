//! The unit tests of `rest.rs`.

use super::*;
use base64::Engine;

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

#[test]
fn a_history_cursor_is_read_back_only_as_this_server_writes_it() {
    let ticket = uuid::Uuid::new_v4();
    let raw = format!("1796630400000000.2.17.{ticket}");
    let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    assert_eq!(
        parse_history_cursor(&cursor).expect("a cursor"),
        (1_796_630_400_000_000, 2, 17, ticket)
    );
    for forged in [
        "x.2.17.0",
        "1.2.17",
        "1.two.17.00000000-0000-0000-0000-000000000000",
    ] {
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged);
        assert!(parse_history_cursor(&cursor).is_err(), "{forged}");
    }
    assert!(parse_history_cursor("%%%").is_err());
}
