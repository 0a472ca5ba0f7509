//! The index on made-up documents, no database: its status is the one rule, pages after a
//! cursor list every match once in the order of one page, facets count every match, typos
//! and begun words are found, and type-ahead ranks the soonest and most wanted first.

use chrono::{DateTime, Duration, Utc};
use onsale_edge::EventStatus;
use onsale_projections::catalog::{Document, Search};

use super::*;

fn show(id: &str, performer: &str, name: &str, city: &str, in_days: i64) -> Document {
    let now = Utc::now();
    Document {
        event_id: id.to_owned(),
        name: name.to_owned(),
        performer: performer.to_owned(),
        venue_id: format!("v-{city}"),
        venue_name: format!("{city} Arena"),
        city: city.to_owned(),
        starts_at: now + Duration::days(in_days),
        on_sale_at: now - Duration::minutes(1),
        min_price_cents: 3_000,
        max_price_cents: 9_000,
        waiting_room: false,
        seats_band: 10,
    }
}

fn index_of(docs: &[Document]) -> SearchIndex {
    let index = SearchIndex::new().expect("an index");
    index.apply(docs).expect("taken in");
    index
}

fn search(q: Option<&str>, limit: i64) -> Search {
    Search {
        q: q.map(str::to_owned),
        limit,
        ..Search::default()
    }
}

fn ids(found: &find::Found) -> Vec<String> {
    found.events.iter().map(|e| e.event_id.clone()).collect()
}

#[test]
fn the_index_states_a_shows_status_by_the_one_rule_and_filters_by_it() {
    let now = Utc::now();
    let day = Duration::days(1);
    let mut docs = Vec::new();
    for started in [false, true] {
        for on_sale in [false, true] {
            for band in [0, 3] {
                let mut d = show(
                    &format!("e-{started}-{on_sale}-{band}"),
                    "Someone",
                    "A show",
                    "Oslo",
                    30,
                );
                d.starts_at = if started { now - day } else { now + day * 30 };
                d.on_sale_at = if on_sale { now - day * 2 } else { now + day };
                d.seats_band = band;
                docs.push(d);
            }
        }
    }
    let index = index_of(&docs);
    let rule = |d: &Document| {
        EventStatus::at(
            now,
            d.starts_at,
            d.on_sale_at,
            Some(i32::from(d.seats_band)),
        )
    };
    let all = find(&index, &search(None, 100), None, now).expect("a search");
    assert_eq!(all.events.len(), docs.len());
    for e in &all.events {
        let d = docs
            .iter()
            .find(|d| d.event_id == e.event_id)
            .expect("held");
        assert_eq!(e.status, rule(d), "{}", d.event_id);
    }
    for status in [
        EventStatus::Scheduled,
        EventStatus::OnSale,
        EventStatus::SoldOut,
        EventStatus::Started,
    ] {
        let only = Search {
            status: Some(status.as_str().to_owned()),
            ..search(None, 100)
        };
        let mut got = ids(&find(&index, &only, None, now).expect("a search"));
        got.sort();
        let mut want: Vec<String> = docs
            .iter()
            .filter(|d| rule(d) == status)
            .map(|d| d.event_id.clone())
            .collect();
        want.sort();
        assert!(!want.is_empty());
        assert_eq!(got, want, "{status:?}");
    }
}

#[test]
fn pages_after_a_cursor_list_every_match_once_in_the_order_of_one_page() {
    // Thirty shows, many starting at the same time and named alike (ties on score and start).
    let docs: Vec<Document> = (0..30)
        .map(|i| {
            let mut d = show(
                &format!("e{i:02}"),
                "Metallica",
                "World Tour",
                "Oslo",
                10 + i % 3,
            );
            d.starts_at = DateTime::from_timestamp(1_900_000_000 + (i % 3) * 3600, 0).expect("t");
            d
        })
        .collect();
    let index = index_of(&docs);
    let now = Utc::now();
    for q in [None, Some("metallica"), Some("metal")] {
        let whole = ids(&find(&index, &search(q, 100), None, now).expect("one page"));
        assert_eq!(whole.len(), 30, "{q:?}");
        for size in [1, 4, 7] {
            let (mut paged, mut after) = (Vec::new(), None);
            loop {
                let page = find(&index, &search(q, size), after, now).expect("a page");
                paged.extend(ids(&page));
                match page.next {
                    Some(c) => after = Some(c),
                    None => break,
                }
            }
            assert_eq!(paged, whole, "{q:?} by {size}");
        }
    }
}

#[test]
fn typos_and_begun_words_are_found_and_facets_count_every_match() {
    let mut docs = vec![
        show("m1", "Metallica", "World Tour", "Oslo", 10),
        show("m2", "Metallica", "Acoustic Evening", "Bergen", 50),
        show("b1", "Beyoncé", "Renaissance", "Bergen", 20),
        show("s1", "Slayer", "Metal Mass", "Oslo", 40),
        show("t1", "The Stooges", "Garage Nights", "Trondheim", 10),
    ];
    docs[4].seats_band = 0;
    docs[2].min_price_cents = 12_000;
    let index = index_of(&docs);
    let now = Utc::now();
    let best = |q: &str| {
        let found = find(&index, &search(Some(q), 20), None, now).expect("a search");
        found.events.first().map(|e| e.performer.clone())
    };
    for (typed, expect) in [
        ("metallica", "Metallica"),
        ("metalica", "Metallica"),
        ("Metallika", "Metallica"),
        ("metlica", "Metallica"),
        ("beyonse", "Beyoncé"),
        ("beyonce", "Beyoncé"),
        ("renaisance", "Beyoncé"),
        ("stoges", "The Stooges"),
        ("slyer", "Slayer"),
        ("garage nights", "The Stooges"),
    ] {
        assert_eq!(best(typed).as_deref(), Some(expect), "{typed}");
    }
    // An exact word outranks a begun one: "metal" is Slayer's show before Metallica's two.
    let metal = find(&index, &search(Some("metal"), 20), None, now).expect("a search");
    assert_eq!(ids(&metal), ["s1", "m1", "m2"]);
    // Facets count every match, not the page's.
    let one = find(&index, &search(None, 1), None, now).expect("a search");
    assert_eq!(one.events.len(), 1);
    let count = |f: &[Facet], v: &str| f.iter().find(|x| x.value == v).map(|x| x.count);
    assert_eq!(count(&one.facets.city, "Oslo"), Some(2));
    assert_eq!(count(&one.facets.city, "Bergen"), Some(2));
    assert_eq!(count(&one.facets.city, "Trondheim"), Some(1));
    assert_eq!(count(&one.facets.status, "SOLD_OUT"), Some(1));
    assert_eq!(count(&one.facets.status, "ON_SALE"), Some(4));
    assert_eq!(count(&one.facets.price_band, "25_TO_50"), Some(4));
    assert_eq!(count(&one.facets.price_band, "100_TO_200"), Some(1));
    assert_eq!(one.facets.month.iter().map(|f| f.count).sum::<u64>(), 5);
    // Filters combine: a city and a band of the cheapest price.
    let bergen_dear = Search {
        city: Some("bergen".into()),
        cheapest: Some((10_000, 20_000)),
        ..search(None, 20)
    };
    assert_eq!(
        ids(&find(&index, &bergen_dear, None, now).expect("a search")),
        ["b1"]
    );
    // Nothing found: the nearest performer is offered.
    let none = find(&index, &search(Some("metallicka zzzz"), 20), None, now).expect("a search");
    assert!(none.events.is_empty());
    assert_eq!(none.did_you_mean.as_deref(), Some("Metallica"));
}

#[test]
fn type_ahead_names_performers_shows_venues_and_cities_soonest_and_most_wanted_first() {
    let mut docs = vec![
        show("a", "Metallica", "World Tour", "Oslo", 10),
        show("b", "Metric", "Formentera", "Bergen", 12),
        show("c", "Metronomy", "Small World", "Metz", 14),
        show("old", "Metalheads", "Last Night", "Oslo", -3),
    ];
    // Metric is nearly sold out: the most wanted.
    docs[1].seats_band = 1;
    let index = index_of(&docs);
    let now = Utc::now();
    let got = suggest(&index, "met", 8, now).expect("suggestions");
    let performers: Vec<&str> = got
        .suggestions
        .iter()
        .filter(|s| s.kind == SuggestionKind::Performer)
        .map(|s| s.text.as_str())
        .collect();
    assert_eq!(performers.first(), Some(&"Metric"), "{got:?}");
    assert!(
        !performers.contains(&"Metalheads"),
        "a show that started is no suggestion"
    );
    assert!(got
        .suggestions
        .iter()
        .any(|s| s.kind == SuggestionKind::City && s.text == "Metz"));
    // A city before a venue named after it, when both match alike.
    let metz = suggest(&index, "metz", 2, now).expect("suggestions");
    let kinds: Vec<SuggestionKind> = metz.suggestions.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [SuggestionKind::City, SuggestionKind::Venue],
        "{metz:?}"
    );
    // A typo in a begun word (four letters on), and a whole word before it.
    let typo = suggest(&index, "metallics", 8, now).expect("suggestions");
    assert_eq!(
        typo.suggestions.first().map(|s| s.text.as_str()),
        Some("Metallica")
    );
    let show = suggest(&index, "small wor", 8, now).expect("suggestions");
    let first = show.suggestions.first().expect("a show");
    assert_eq!(
        (first.kind, first.event_id.as_deref()),
        (SuggestionKind::Show, Some("c"))
    );
    assert!(suggest(&index, "  ", 8, now)
        .expect("none")
        .suggestions
        .is_empty());
}

#[test]
fn a_document_taken_in_again_replaces_the_one_before() {
    let mut d = show("x", "Slayer", "Metal Mass", "Oslo", 40);
    let index = index_of(std::slice::from_ref(&d));
    d.seats_band = 0;
    index.apply(std::slice::from_ref(&d)).expect("again");
    assert_eq!(index.documents(), 1);
    let found = find(&index, &search(None, 10), None, Utc::now()).expect("a search");
    assert_eq!(found.events[0].status, EventStatus::SoldOut);
}

#[test]
fn filters_at_their_extremes_find_what_they_say_and_never_fail() {
    let index = index_of(&[show("x", "Slayer", "Metal Mass", "Oslo", 40)]);
    let now = Utc::now();
    let run = |s: Search| ids(&find(&index, &s, None, now).expect("a search"));
    // The fuzz test's case: a price bound at the largest number (no bound past it to exclude).
    let dear = Search {
        min_price: Some(0),
        max_price: Some(i64::MAX),
        ..search(None, 10)
    };
    assert_eq!(run(dear), ["x"]);
    let none = Search {
        min_price: Some(i64::MAX),
        ..search(None, 10)
    };
    assert!(run(none).is_empty());
    // A span that ends before it starts holds nothing.
    let backwards = Search {
        from: Some(now + Duration::days(60)),
        to: Some(now),
        ..search(None, 10)
    };
    assert!(run(backwards).is_empty());
    let top = Search {
        cheapest: Some((20_000, i64::MAX)),
        ..search(None, 10)
    };
    assert!(run(top).is_empty());
}

#[test]
fn names_written_one_show_at_a_time_are_all_suggested() {
    let index = SearchIndex::new().expect("an index");
    for d in [
        show("m1", "Metallica", "World Tour", "Oslo", 10),
        show("b1", "Beyonce", "Renaissance", "Bergen", 20),
        show("p1", "Oslo Philharmonic", "Night of Strings", "Oslo", 30),
        show("m2", "Metallica", "Acoustic Evening", "Bergen", 50),
    ] {
        index.apply(&[d]).expect("taken in");
    }
    let now = Utc::now();
    for (typed, first) in [
        ("beyo", "Beyonce"),
        ("metal", "Metallica"),
        ("renaisa", "Renaissance"),
        ("phil", "Oslo Philharmonic"),
    ] {
        let got = suggest(&index, typed, 8, now).expect("suggestions");
        assert_eq!(
            got.suggestions.first().map(|s| s.text.as_str()),
            Some(first),
            "{typed}: {got:?}"
        );
    }
}
