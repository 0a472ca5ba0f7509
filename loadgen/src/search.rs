//! `loadgen bench-search`: the catalog search on a catalog of many shows. Fills the catalog
//! (through its owner, `onsale_projections::catalog::replace_with`) with a deterministic
//! synthetic catalog (performers and names made of syllables, 60 cities, a year of dates,
//! prices), then runs one mix of queries (a performer's name, the same with a typo, a city,
//! words and a city, a date range and a status, a price range) for a fixed time, from many
//! clients at once: in process through `onsale_query::catalog::search` on PostgreSQL (the
//! statement and its plan), and through HTTP against a running `onsale serve` without the
//! search index and another with it (what a fan gets, ADR 033); then type-ahead, prefixes of 1
//! to 6 letters with a typo in one of three, against the second.

use std::sync::Arc;

use anyhow::Context;
use std::time::{Duration, Instant};

use onsale_projections::catalog::Listing;
use onsale_query::catalog::SearchQuery;
use rand::{Rng, SeedableRng};

const SYLLABLES: [&str; 40] = [
    "ka", "lo", "ri", "ven", "mar", "tis", "bel", "no", "ra", "dun", "sel", "vi", "oth", "ar",
    "lin", "mo", "zer", "qua", "fen", "dra", "sol", "ix", "ber", "tan", "gul", "ev", "nor", "pha",
    "cy", "rum", "est", "ola", "kin", "bro", "sta", "mel", "ody", "jun", "har", "wex",
];
const WORDS: [&str; 24] = [
    "Tour",
    "Live",
    "Night",
    "Nights",
    "Evening",
    "Symphony",
    "Festival",
    "Unplugged",
    "Reunion",
    "Acoustic",
    "Arena",
    "Session",
    "Encore",
    "Anniversary",
    "Summer",
    "Winter",
    "World",
    "Farewell",
    "Revival",
    "Gala",
    "Showcase",
    "Spectacular",
    "Marathon",
    "Matinee",
];

fn word(rng: &mut rand::rngs::StdRng, syllables: usize) -> String {
    let mut w: String = (0..syllables)
        .map(|_| SYLLABLES[rng.random_range(0..SYLLABLES.len())])
        .collect();
    if let Some(first) = w.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    w
}

/// One synthetic show.
#[derive(Debug, Clone)]
pub(crate) struct Doc {
    pub(crate) id: String,
    pub(crate) performer: String,
    pub(crate) name: String,
    pub(crate) venue: String,
    pub(crate) city: String,
    pub(crate) starts_at: chrono::DateTime<chrono::Utc>,
    pub(crate) min_price: i64,
    pub(crate) max_price: i64,
}

/// The catalog of `n` shows: 8,000 performers (some share a first word), 60 cities.
pub(crate) fn catalog(n: usize) -> Vec<Doc> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(20_261_202);
    let performers: Vec<String> = (0..8_000)
        .map(|i| {
            if i % 3 == 0 {
                format!("{} {}", word(&mut rng, 2), word(&mut rng, 2))
            } else {
                word(&mut rng, 3)
            }
        })
        .collect();
    let cities: Vec<String> = (0..60).map(|_| word(&mut rng, 2)).collect();
    let base = chrono::Utc::now() + chrono::Duration::days(1);
    (0..n)
        .map(|i| {
            let city = cities[rng.random_range(0..cities.len())].clone();
            let min = 1_000 * rng.random_range(1..30_i64);
            Doc {
                id: uuid::Uuid::from_u128(0x0001_0000_0000_7000_8000_0000_0000_0000 + i as u128)
                    .to_string(),
                performer: performers[rng.random_range(0..performers.len())].clone(),
                name: format!(
                    "{} {}",
                    WORDS[rng.random_range(0..WORDS.len())],
                    WORDS[rng.random_range(0..WORDS.len())]
                ),
                venue: format!("{city} {}", ["Arena", "Hall", "Stadium", "Club"][i % 4]),
                city,
                starts_at: base + chrono::Duration::minutes(rng.random_range(0..525_600)),
                min_price: min,
                max_price: min + 1_000 * rng.random_range(0..40_i64),
            }
        })
        .collect()
}

/// A performer's name with one letter dropped or two swapped (never the first).
fn typo(rng: &mut rand::rngs::StdRng, s: &str) -> String {
    let mut c: Vec<char> = s.chars().collect();
    if c.len() < 5 {
        return s.to_owned();
    }
    let i = rng.random_range(1..c.len() - 2);
    if rng.random_bool(0.5) {
        c.remove(i);
    } else {
        c.swap(i, i + 1);
    }
    c.into_iter().collect()
}

/// The query mix, drawn from the catalog.
pub(crate) fn queries(docs: &[Doc], n: usize) -> Vec<SearchQuery> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    (0..n)
        .map(|i| {
            let d = &docs[rng.random_range(0..docs.len())];
            let mut q = SearchQuery::default();
            match i % 10 {
                0..=3 => q.q = Some(d.performer.clone()),
                4..=6 => q.q = Some(typo(&mut rng, &d.performer)),
                7 => q.city = Some(d.city.clone()),
                8 => {
                    q.q = Some(d.name.split(' ').next().unwrap_or("Live").to_owned());
                    q.city = Some(d.city.clone());
                }
                _ => {
                    let from = d.starts_at.date_naive();
                    q.from = Some(from.to_string());
                    q.to = Some((from + chrono::Duration::days(7)).to_string());
                    q.status = Some("ON_SALE".into());
                    q.max_price = Some(d.max_price);
                }
            }
            q
        })
        .collect()
}

/// The query string of `q` for `GET /v1/events`.
pub(crate) fn query_string(q: &SearchQuery) -> String {
    let mut parts = Vec::new();
    let mut add = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            parts.push(format!("{k}={}", v.replace(' ', "%20")));
        }
    };
    add("q", &q.q);
    add("city", &q.city);
    add("from", &q.from);
    add("to", &q.to);
    add("status", &q.status);
    if let Some(p) = q.max_price {
        parts.push(format!("maxPrice={p}"));
    }
    parts.join("&")
}

/// Makes `docs` the catalog (replacing what is there), through the catalog's owner: every show
/// on sale since yesterday, 1,000 seats each, all available.
pub(crate) async fn fill(pool: &sqlx::PgPool, docs: &[Doc]) -> anyhow::Result<()> {
    let yesterday = chrono::Utc::now() - chrono::Duration::days(1);
    let listings: Vec<Listing> = docs
        .iter()
        .map(|d| Listing {
            event_id: d.id.clone(),
            name: d.name.clone(),
            performer: d.performer.clone(),
            venue_name: d.venue.clone(),
            city: d.city.clone(),
            starts_at: d.starts_at,
            on_sale_at: yesterday,
            min_price_cents: d.min_price,
            max_price_cents: d.max_price,
            seats: 1_000,
            available: 1_000,
        })
        .collect();
    onsale_projections::catalog::replace_with(pool, &listings).await?;
    Ok(())
}

/// What a run measured.
#[derive(Debug)]
pub(crate) struct Measured {
    pub(crate) queries: u64,
    pub(crate) per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub(crate) empty: u64,
}

/// Runs `one` over the mix from `clients` tasks for `seconds`.
pub(crate) async fn measure<T, F, Fut>(
    clients: usize,
    seconds: u64,
    mix: Arc<Vec<T>>,
    one: F,
) -> anyhow::Result<Measured>
where
    T: Clone + Send + Sync + 'static,
    F: Fn(T) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<usize>> + Send,
{
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (mix, one) = (mix.clone(), one.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = hdrhistogram::Histogram::<u64>::new(3)?;
            let mut empty = 0;
            let mut i = c * 97;
            while Instant::now() < until {
                let q = mix[i % mix.len()].clone();
                i += 1;
                let t = Instant::now();
                if one(q).await? == 0 {
                    empty += 1;
                }
                h.record(t.elapsed().as_micros() as u64)?;
            }
            Ok::<_, anyhow::Error>((h, empty))
        }));
    }
    let mut all = hdrhistogram::Histogram::<u64>::new(3)?;
    let mut empty = 0;
    for t in tasks {
        let (h, e) = t.await??;
        all.add(&h)?;
        empty += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(Measured {
        queries: all.len(),
        per_sec: all.len() as f64 / elapsed,
        p50_ms: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: all.value_at_quantile(0.99) as f64 / 1000.0,
        empty,
    })
}

/// The type-ahead mix: the first 1 to 6 letters of a performer, a show's name, a city or a
/// venue, one prefix in three with a typo (two letters swapped or one changed, never the first).
pub(crate) fn prefixes(docs: &[Doc], n: usize) -> Vec<String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    (0..n)
        .map(|i| {
            let d = &docs[rng.random_range(0..docs.len())];
            let text = match i % 4 {
                0 => &d.performer,
                1 => &d.name,
                2 => &d.city,
                _ => &d.venue,
            };
            let mut c: Vec<char> = text.chars().take(rng.random_range(1..=6)).collect();
            if i % 3 == 0 && c.len() >= 4 {
                let at = rng.random_range(1..c.len() - 1);
                if rng.random_bool(0.5) {
                    c.swap(at, at + 1);
                } else {
                    c[at] = SYLLABLES[rng.random_range(0..SYLLABLES.len())]
                        .chars()
                        .next()
                        .unwrap_or('a');
                }
            }
            c.into_iter().collect()
        })
        .collect()
}

/// Waits until the search index behind `base` holds this fill of the catalog: its first show
/// starts when this fill's first does (each fill's starts are its own).
async fn index_holds(
    http: &reqwest::Client,
    base: &str,
    first: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let body: serde_json::Value = http
            .get(format!("{base}/v1/events?limit=1"))
            .send()
            .await?
            .json()
            .await?;
        let e = &body["events"][0];
        let starts = e["startsAt"]
            .as_str()
            .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok());
        if body["facets"].is_object()
            && starts.map(|t| t.timestamp_micros()) == Some(first.timestamp_micros())
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the search index has not read the catalog after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GETs `url` and counts the members of `list` in its answer.
async fn count(http: &reqwest::Client, url: String, list: &str) -> anyhow::Result<usize> {
    let res = http.get(&url).send().await?;
    anyhow::ensure!(res.status().is_success(), "{url}: {}", res.status());
    let body: serde_json::Value = res.json().await?;
    Ok(body[list].as_array().map_or(0, Vec::len))
}

fn row(name: &str, clients: usize, m: &Measured) {
    println!(
        "| {name} | {clients} | {} | {:.0} | {:.2} | {:.2} | {} |",
        m.queries, m.per_sec, m.p50_ms, m.p99_ms, m.empty
    );
}

/// The benchmark: fill the catalog, then the same mix from PostgreSQL in process and over HTTP
/// (`base`, a server without the index), from the search index over HTTP (`index_base`, a
/// server with it, once it holds every show), and type-ahead from it; a table row each.
pub(crate) async fn run(
    pool: sqlx::PgPool,
    base: Option<String>,
    index_base: Option<String>,
    shows: usize,
    clients: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let docs = catalog(shows);
    fill(&pool, &docs).await?;
    println!(
        "catalog: {shows} shows written and analyzed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mix = Arc::new(queries(&docs, 2_000));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()?;
    if let Some(index_base) = &index_base {
        let t = Instant::now();
        let first = docs
            .iter()
            .map(|d| d.starts_at)
            .min()
            .context("a catalog")?;
        index_holds(&http, index_base, first).await?;
        println!(
            "search index: {shows} shows held {:.1} s after the catalog was written",
            t.elapsed().as_secs_f64()
        );
    }
    // A server-less index that never reads: the search falls to PostgreSQL.
    let unread = onsale_query::search::SearchIndex::new()?;
    let sql_pool = pool.clone();
    let sql = measure(clients, seconds, mix.clone(), move |q| {
        let (pool, unread) = (sql_pool.clone(), unread.clone());
        async move {
            let found = onsale_query::catalog::search(&pool, &unread, &q)
                .await
                .map_err(|e| anyhow::anyhow!("{}: {}", e.code, e.detail))?;
            Ok(found.events.len())
        }
    })
    .await?;
    row("postgresql (in process)", clients, &sql);
    for (name, base) in [
        ("postgresql (HTTP, onsale serve)", &base),
        ("search index (HTTP, onsale serve)", &index_base),
    ] {
        let Some(base) = base.clone() else { continue };
        let http = http.clone();
        let got = measure(clients, seconds, mix.clone(), move |q| {
            let url = format!("{base}/v1/events?{}", query_string(&q));
            let http = http.clone();
            async move { count(&http, url, "events").await }
        })
        .await?;
        row(name, clients, &got);
    }
    if let Some(base) = index_base {
        let typed = Arc::new(prefixes(&docs, 2_000));
        let got = measure(clients, seconds, typed, move |q| {
            let url = format!("{base}/v1/events/suggest?q={}", q.replace(' ', "%20"));
            let http = http.clone();
            async move { count(&http, url, "suggestions").await }
        })
        .await?;
        row("type-ahead (HTTP, search index)", clients, &got);
    }
    Ok(())
}
