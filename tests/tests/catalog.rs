//! Fans find shows: the catalog search of docs/api.md (`GET /v1/events?q=&city=&date=`), fed from
//! the log through the catalog projection, over REST and gRPC `Events`; and the venue page.

use onsale_proto::v1 as pb;
use onsale_tests::read_path::{shared_brokers, ReadPath};
use onsale_tests::TestDb;
use serde_json::{json, Value};

struct Show {
    name: &'static str,
    performer: &'static str,
    city: &'static str,
    in_days: i64,
    prices: (i64, i64),
    seats: u32,
}

const SHOWS: [Show; 6] = [
    Show {
        name: "World Tour",
        performer: "Metallica",
        city: "Oslo",
        in_days: 10,
        prices: (9000, 25000),
        seats: 4,
    },
    Show {
        name: "Renaissance",
        performer: "Beyonce",
        city: "Bergen",
        in_days: 20,
        prices: (12000, 40000),
        seats: 4,
    },
    Show {
        name: "Night of Strings",
        performer: "Oslo Philharmonic",
        city: "Oslo",
        in_days: 30,
        prices: (3000, 6000),
        seats: 4,
    },
    Show {
        name: "Garage Nights",
        performer: "The Stooges",
        city: "Trondheim",
        in_days: 10,
        prices: (2000, 2500),
        seats: 1,
    },
    Show {
        name: "Metal Mass",
        performer: "Slayer",
        city: "Oslo",
        in_days: 40,
        prices: (5000, 8000),
        seats: 4,
    },
    Show {
        name: "Acoustic Evening",
        performer: "Metallica",
        city: "Bergen",
        in_days: 50,
        prices: (15000, 30000),
        seats: 4,
    },
];

async fn schedule(rp: &ReadPath, s: &Show) -> (String, String) {
    let admin = rp.app.admin();
    let (status, venue) = rp
        .app
        .post(
            "/v1/venues",
            &admin,
            json!({"name": format!("{} Arena", s.city), "city": s.city, "sections": [
                {"section": "A", "priceTier": "HI", "rows": [{"row": "1", "seats": s.seats}]},
                {"section": "B", "priceTier": "LO", "rows": [{"row": "1", "seats": 2}, {"row": "2", "seats": 3}]}]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{venue}");
    let now = chrono::Utc::now();
    let (status, event) = rp
        .app
        .post(
            "/v1/events",
            &admin,
            json!({"name": s.name, "performer": s.performer, "venueId": venue["venueId"],
                   "startsAt": now + chrono::Duration::days(s.in_days),
                   "onSaleAt": now - chrono::Duration::minutes(1),
                   "prices": {"HI": s.prices.1, "LO": s.prices.0}}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{event}");
    (
        event["eventId"].as_str().expect("id").to_owned(),
        venue["venueId"].as_str().expect("id").to_owned(),
    )
}

async fn search(rp: &ReadPath, query: &str) -> (u16, Value) {
    rp.app.get(&format!("/v1/events?{query}"), "").await
}

/// Every page of `query`, followed by its cursors (at most ten pages).
async fn all_pages(rp: &ReadPath, query: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let (status, page) = search(rp, &format!("{query}{cursor}")).await;
        assert_eq!(status, 200, "{page}");
        found.extend(performers(&page));
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return found,
        }
    }
    panic!("{query}: more than ten pages");
}

fn performers(v: &Value) -> Vec<String> {
    v["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            format!(
                "{} / {}",
                e["performer"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The relevance suite on the process's search index (ADR 033), which answers once it has read
/// the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fans_find_shows_by_name_despite_typos_and_by_city_date_status_and_price() {
    fans_find_shows(true).await;
}

/// The same suite on PostgreSQL (ADR 013), what answers while an index is still reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_suite_passes_on_postgresql_without_the_index() {
    fans_find_shows(false).await;
}

async fn fans_find_shows(index: bool) {
    let db = TestDb::new().await.expect("db");
    let brokers = shared_brokers().expect("brokers");
    let rp = ReadPath::spawn_parts(&db, &brokers, |s| s.query.search_index = index, &[])
        .await
        .expect("read path");
    let mut ids = Vec::new();
    for s in &SHOWS {
        ids.push(schedule(&rp, s).await);
    }
    // The Stooges' only seat of section A and the five of B are sold: the show is sold out.
    let (stooges, _) = &ids[3];
    let fan = rp.app.fan("ann");
    let (status, hold) = rp
        .app
        .hold(
            stooges,
            &fan,
            json!({"seatIds": ["A-1-1", "B-1-1", "B-1-2", "B-2-1", "B-2-2", "B-2-3"]}),
            None,
        )
        .await;
    assert_eq!(status, 201, "{hold}");
    let (status, order) = rp.app.order(&hold["holdId"], &fan, "k1").await;
    assert_eq!(status, 202, "{order}");
    // Everything is in the catalog once the projection has it.
    let all = rp
        .eventually("/v1/events?limit=100", "", |s, v| {
            s == 200
                && v["events"]
                    .as_array()
                    .is_some_and(|e| e.len() == SHOWS.len())
                && v["events"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|x| x["status"] == "SOLD_OUT"))
        })
        .await;
    // The engine that answered: the index says how the matches spread, PostgreSQL does not.
    assert_eq!(all["facets"].is_object(), index, "{all}");
    // Browsing: soonest first, every field docs/api.md lists.
    let first = &all["events"][0];
    for field in [
        "eventId",
        "name",
        "performer",
        "venueName",
        "city",
        "startsAt",
        "onSaleAt",
        "status",
        "minPriceCents",
        "maxPriceCents",
    ] {
        assert!(!first[field].is_null(), "{field} in {first}");
    }
    let starts: Vec<&str> = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["startsAt"].as_str().expect("t"))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
    let sold_out: Vec<&Value> = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["status"] == "SOLD_OUT")
        .collect();
    assert_eq!(sold_out.len(), 1);
    assert_eq!(sold_out[0]["eventId"], stooges.as_str());
    // The event page says so too (its availability from the same projection).
    let fan = rp.app.fan("browser");
    let (status, page) = rp.app.get(&format!("/v1/events/{stooges}"), &fan).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        (&page["status"], &page["availableSeats"]),
        (&json!("SOLD_OUT"), &json!(0))
    );
    let on_sale = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["status"] == "ON_SALE")
        .expect("a show on sale");
    let (_, page) = rp
        .app
        .get(
            &format!("/v1/events/{}", on_sale["eventId"].as_str().expect("id")),
            &fan,
        )
        .await;
    assert_eq!(page["status"], "ON_SALE");
    assert_eq!(page["availableSeats"], page["seatCount"]);

    // Words, ranked; a typo in the performer or the name still finds the show.
    let (status, found) = search(&rp, "q=metallica").await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        performers(&found)[..2],
        ["Metallica / World Tour", "Metallica / Acoustic Evening"]
    );
    // (`slyer` and `metlica` are near Slayer and Metallica only at the loose threshold: the
    // strict search finds nothing and the search tries again.)
    for typo in [
        "metalica",
        "Metallika",
        "beyonse",
        "renaisance",
        "stoges",
        "slyer",
    ] {
        let (_, found) = search(&rp, &format!("q={typo}")).await;
        assert!(!performers(&found).is_empty(), "{typo} finds nothing");
        let best = &performers(&found)[0];
        let expect = match typo {
            "metalica" | "Metallika" => "Metallica",
            "beyonse" | "renaisance" => "Beyonce",
            "slyer" => "Slayer",
            _ => "The Stooges",
        };
        assert!(best.starts_with(expect), "{typo}: {best}");
    }
    // A city's name is a word of the search too, and a filter.
    let (_, oslo) = search(&rp, "city=oslo").await;
    assert_eq!(
        performers(&oslo),
        [
            "Metallica / World Tour",
            "Oslo Philharmonic / Night of Strings",
            "Slayer / Metal Mass"
        ]
    );
    let (_, q_oslo) = search(&rp, "q=metal&city=Oslo").await;
    assert!(
        performers(&q_oslo)
            .iter()
            .all(|p| p != "Metallica / Acoustic Evening"),
        "{q_oslo}"
    );
    // A day, a range, a status and a price range.
    let day = all["events"][0]["startsAt"]
        .as_str()
        .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
        .expect("a start")
        .date_naive();
    assert_eq!(all["events"][0]["performer"], "Metallica");
    let (_, on_day) = search(&rp, &format!("date={day}")).await;
    assert_eq!(
        performers(&on_day),
        ["Metallica / World Tour", "The Stooges / Garage Nights"]
    );
    let (from, to) = (
        (chrono::Utc::now() + chrono::Duration::days(15)).date_naive(),
        (chrono::Utc::now() + chrono::Duration::days(35)).date_naive(),
    );
    let (_, range) = search(&rp, &format!("from={from}&to={to}")).await;
    assert_eq!(
        performers(&range),
        [
            "Beyonce / Renaissance",
            "Oslo Philharmonic / Night of Strings"
        ]
    );
    let (_, on_sale) = search(&rp, "status=ON_SALE&city=Trondheim").await;
    assert!(performers(&on_sale).is_empty(), "{on_sale}");
    let (_, sold) = search(&rp, "status=SOLD_OUT").await;
    assert_eq!(performers(&sold), ["The Stooges / Garage Nights"]);
    let (_, cheap) = search(&rp, "maxPrice=5000").await;
    assert_eq!(
        performers(&cheap),
        [
            "The Stooges / Garage Nights",
            "Oslo Philharmonic / Night of Strings",
            "Slayer / Metal Mass"
        ]
    );
    let (_, dear) = search(&rp, "minPrice=30000&maxPrice=100000").await;
    assert_eq!(
        performers(&dear),
        ["Beyonce / Renaissance", "Metallica / Acoustic Evening"]
    );

    // Pages: every show once, in the same order as one page, browsing, ranked, and ranked on
    // the loose pass (its threshold kept by the cursor).
    assert_eq!(all_pages(&rp, "limit=2").await, performers(&all));
    for q in ["metal", "metlica"] {
        let paged = all_pages(&rp, &format!("q={q}&limit=1")).await;
        let (_, one_page) = search(&rp, &format!("q={q}&limit=100")).await;
        assert_eq!(paged, performers(&one_page), "{q}");
        assert!(paged.len() >= 2, "{q}: {paged:?}");
    }

    // Bad input is refused with a code.
    for bad in [
        "date=tomorrow",
        "status=CHEAP",
        "limit=0",
        "limit=101",
        "minPrice=-1",
        "cursor=nope!",
        "from=yesterday",
        // PostgreSQL text holds no NUL: a 400, not the database's error as a 503.
        "city=Os%00lo",
        "q=metal%00",
    ] {
        let (status, body) = search(&rp, bad).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("INVALID_REQUEST")),
            "{bad}: {body}"
        );
    }
    let (status, _) = search(&rp, &format!("q={}", "x".repeat(201))).await;
    assert_eq!(status, 400);

    // The venue page.
    let (status, venue) = rp.app.get(&format!("/v1/venues/{}", ids[0].1), "").await;
    assert_eq!(status, 200, "{venue}");
    assert_eq!(
        (
            venue["city"].as_str(),
            venue["seats"].as_u64(),
            venue["sections"][1]["seats"].as_u64(),
            venue["sections"][1]["rows"][1]["seats"].as_u64()
        ),
        (Some("Oslo"), Some(9), Some(5), Some(3))
    );
    let (status, body) = rp
        .app
        .get(&format!("/v1/venues/{}", uuid::Uuid::now_v7()), "")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("VENUE_NOT_FOUND"))
    );

    // The same over gRPC.
    let mut events = pb::events_client::EventsClient::connect(rp.grpc.clone())
        .await
        .expect("grpc");
    let found = events
        .search_events(pb::SearchEventsRequest {
            q: "metalica".into(),
            city: "bergen".into(),
            ..Default::default()
        })
        .await
        .expect("search")
        .into_inner();
    assert_eq!(found.events.len(), 1);
    assert_eq!(found.events[0].name, "Acoustic Evening");
    assert_eq!(found.facets.is_some(), index, "{found:?}");
    let one = events
        .get_event(pb::GetEventRequest {
            event_id: stooges.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(
        (one.performer.as_str(), one.status.as_str()),
        ("The Stooges", "SOLD_OUT")
    );
    let missing = events
        .get_event(pb::GetEventRequest {
            event_id: uuid::Uuid::now_v7().to_string(),
        })
        .await
        .expect_err("no such show");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let bad = events
        .search_events(pb::SearchEventsRequest {
            status: "CHEAP".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad status");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    rp.stop().await;
}

/// An event's status has one rule (`EventStatus::at`: started, else sold out, else before or
/// after its on-sale), and the catalog's search states it again in SQL to filter by it: the
/// two agree on every combination, both as the status a search answers and as the filter.
#[tokio::test]
async fn the_catalogs_status_in_sql_is_the_one_rule_of_event_status() {
    use onsale_edge::EventStatus;
    use onsale_projections::catalog::{replace_with, search, Listing, Search};
    use onsale_query::catalog::EventSummary;
    let db = TestDb::new().await.expect("db");
    let pool = db.pool().await.expect("pool");
    onsale_eventlog::migrate(&pool).await.expect("migrations");
    let now = chrono::Utc::now();
    let day = chrono::Duration::days(1);
    let mut listings = Vec::new();
    for started in [false, true] {
        for on_sale in [false, true] {
            for available in [0, 3] {
                let starts_at = if started { now - day } else { now + day * 30 };
                let on_sale_at = if on_sale { now - day * 2 } else { now + day };
                listings.push(Listing {
                    event_id: format!("e-{started}-{on_sale}-{available}"),
                    name: "A show".into(),
                    performer: "Someone".into(),
                    venue_name: "A hall".into(),
                    city: "Oslo".into(),
                    starts_at,
                    on_sale_at,
                    min_price_cents: 1_000,
                    max_price_cents: 2_000,
                    seats: 3,
                    available,
                });
            }
        }
    }
    replace_with(&pool, &listings).await.expect("the catalog");
    // The band of seats left, and where it moves: none is 0 at once and back at once; a count
    // within 1% of the seats of a boundary keeps the band it had (no rewrite per batch while
    // holds are made and lapse there), past it the band moves.
    for (band, available, seats, after) in [
        (10, 1_000, 1_000, 10),
        (10, 0, 1_000, 0),
        (0, 1, 1_000, 1),
        (10, 899, 1_000, 10),
        (10, 891, 1_000, 10),
        (10, 889, 1_000, 9),
        (9, 901, 1_000, 9),
        (9, 909, 1_000, 9),
        (9, 915, 1_000, 10),
        (9, 891, 1_000, 9),
        (9, 795, 1_000, 9),
        (9, 789, 1_000, 8),
        (8, 805, 1_000, 8),
        (3, 950, 1_000, 10),
        (1, 2, 3, 7),
    ] {
        let got: i16 = sqlx::query_scalar("SELECT onsale_seats_band_after($1, $2, $3)")
            .bind(band as i16)
            .bind(available)
            .bind(seats)
            .fetch_one(&pool)
            .await
            .expect("a band");
        assert_eq!(got, after, "band {band}, {available} of {seats} left");
    }
    let rule = |l: &Listing| EventStatus::at(now, l.starts_at, l.on_sale_at, Some(l.available));
    let all = Search {
        limit: 100,
        ..Search::default()
    };
    let found: Vec<EventSummary> = search(&pool, &all, 0.3, None).await.expect("a search");
    assert_eq!(found.len(), listings.len());
    for f in &found {
        let l = listings
            .iter()
            .find(|l| l.event_id == f.event_id)
            .expect("listed");
        assert_eq!(f.status, rule(l), "{}", l.event_id);
    }
    for status in [
        EventStatus::Scheduled,
        EventStatus::OnSale,
        EventStatus::SoldOut,
        EventStatus::Started,
    ] {
        let only = Search {
            status: Some(status.as_str().to_owned()),
            limit: 100,
            ..Search::default()
        };
        let mut got: Vec<String> = search::<EventSummary>(&pool, &only, 0.3, None)
            .await
            .expect("a search")
            .into_iter()
            .map(|f| f.event_id)
            .collect();
        got.sort();
        let mut want: Vec<String> = listings
            .iter()
            .filter(|l| rule(l) == status)
            .map(|l| l.event_id.clone())
            .collect();
        want.sort();
        assert!(!want.is_empty(), "every status is among the listings");
        assert_eq!(got, want, "filtered by {status:?}");
    }
}

/// Type-ahead and facets over HTTP, and the index a rebuilt catalog projection gives: a new
/// index read from zero (as every process's at its start) answers every query of the suite as
/// the live one does, which took the rebuild in as changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_ahead_and_facets_and_an_index_rebuilt_from_the_log_answers_as_the_live_one() {
    let db = TestDb::new().await.expect("db");
    let brokers = shared_brokers().expect("brokers");
    let mut rp = ReadPath::spawn(&db, &brokers).await.expect("read path");
    for s in &SHOWS {
        schedule(&rp, s).await;
    }
    let every = |s: u16, v: &Value| {
        s == 200
            && v["events"]
                .as_array()
                .is_some_and(|e| e.len() == SHOWS.len())
    };
    rp.eventually("/v1/events?limit=100", "", every).await;

    // Type-ahead: the performer begun, a typo in a begun word, a show by its name, a city.
    let (status, got) = rp.app.get("/v1/events/suggest?q=metal", "").await;
    assert_eq!(status, 200, "{got}");
    let first = &got["suggestions"][0];
    assert_eq!(
        (&first["kind"], &first["text"]),
        (&json!("PERFORMER"), &json!("Metallica")),
        "{got}"
    );
    let (_, got) = rp.app.get("/v1/events/suggest?q=beyo", "").await;
    let (_, be) = rp.app.get("/v1/events/suggest?q=be", "").await;
    let (_, all_b) = rp.app.get("/v1/events?q=beyonce", "").await;
    assert_eq!(
        got["suggestions"][0]["text"], "Beyonce",
        "{got} {be} {all_b}"
    );
    let (_, got) = rp.app.get("/v1/events/suggest?q=renaisa", "").await;
    let show = &got["suggestions"][0];
    assert_eq!(
        (&show["kind"], &show["text"]),
        (&json!("SHOW"), &json!("Renaissance")),
        "{got}"
    );
    assert!(
        show["eventId"].is_string() && show["startsAt"].is_string(),
        "{show}"
    );
    let (_, got) = rp.app.get("/v1/events/suggest?q=trondh&limit=1", "").await;
    assert_eq!(
        got["suggestions"],
        json!([{"kind": "CITY", "text": "Trondheim"}])
    );
    for bad in [
        "",
        "q=",
        "q=%20",
        "q=ab&limit=0",
        "q=ab&limit=21",
        "q=a%00b",
    ] {
        let (status, body) = rp.app.get(&format!("/v1/events/suggest?{bad}"), "").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("INVALID_REQUEST")),
            "{bad}"
        );
    }
    let long = "x".repeat(101);
    let (status, _) = rp
        .app
        .get(&format!("/v1/events/suggest?q={long}"), "")
        .await;
    assert_eq!(status, 400);

    // Facets count every match, not one page; filters combine; nothing found offers a name.
    let (_, page) = rp.app.get("/v1/events?limit=1", "").await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(1));
    let cities = &page["facets"]["city"];
    assert_eq!(cities[0], json!({"value": "Oslo", "count": 3}), "{page}");
    let total: u64 = page["facets"]["status"]
        .as_array()
        .expect("statuses")
        .iter()
        .filter_map(|f| f["count"].as_u64())
        .sum();
    assert_eq!(total, SHOWS.len() as u64);
    let month = page["facets"]["month"][0]["value"]
        .as_str()
        .expect("a month")
        .to_owned();
    let (_, in_month) = rp
        .app
        .get(&format!("/v1/events?month={month}&city=oslo&limit=100"), "")
        .await;
    assert!(
        in_month["events"]
            .as_array()
            .expect("events")
            .iter()
            .all(|e| e["city"] == "Oslo"
                && e["startsAt"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(&month))),
        "{in_month}"
    );
    let (_, band) = rp.app.get("/v1/events?priceBand=25_TO_50", "").await;
    assert_eq!(performers(&band), ["Oslo Philharmonic / Night of Strings"]);
    let (_, none) = rp.app.get("/v1/events?q=metallicca%20zzzz", "").await;
    assert_eq!(
        (none["events"].as_array().map(Vec::len), &none["didYouMean"]),
        (Some(0), &json!("Metallica")),
        "{none}"
    );
    for bad in ["month=2026-13", "month=2026", "priceBand=CHEAP"] {
        let (status, body) = search(&rp, bad).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("INVALID_REQUEST")),
            "{bad}"
        );
    }

    // The catalog projection rebuilt from the log; then an index read from zero.
    rp.rebuild_projections().await.expect("rebuilt");
    let fresh = onsale_query::search::SearchIndex::new().expect("an index");
    onsale_tests::wait_for(
        "a new index reading every show of the rebuilt catalog",
        std::time::Duration::from_secs(60),
        || async {
            fresh.catch_up(&rp.pool).await.expect("read");
            fresh.documents() == SHOWS.len() as u64
        },
    )
    .await;
    rp.eventually("/v1/events?limit=100", "", every).await;
    for q in [
        "limit=100",
        "q=metallica",
        "q=metlica",
        "q=metal&limit=2",
        "q=beyonse",
        "city=oslo",
        "status=ON_SALE",
        "maxPrice=5000",
        "priceBand=100_TO_200",
        "q=oslo",
        "q=nothing%20like%20it",
    ] {
        let (_, live) = search(&rp, q).await;
        let query: onsale_query::catalog::SearchQuery = query_of(q);
        let rebuilt = onsale_query::catalog::search(&rp.pool, &fresh, &query)
            .await
            .expect("a search");
        let rebuilt = serde_json::to_value(rebuilt).expect("json");
        assert_eq!(
            (performers(&live), &live["facets"], &live["didYouMean"]),
            (
                performers(&rebuilt),
                &rebuilt["facets"],
                &rebuilt["didYouMean"]
            ),
            "{q}"
        );
    }
    rp.stop().await;
}

/// `a=b&c=d` as the REST route reads it.
fn query_of(q: &str) -> onsale_query::catalog::SearchQuery {
    let pairs: serde_json::Map<String, Value> = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = v.replace("%20", " ");
            let value = match v.parse::<i64>() {
                Ok(n) if k != "q" => json!(n),
                _ => json!(v),
            };
            (k.to_owned(), value)
        })
        .collect();
    serde_json::from_value(Value::Object(pairs)).expect("a query")
}
