//! `loadgen bench-search`: the catalog search on a catalog of many shows. Fills the catalog
//! (through its owner, `onsale_projections::catalog::replace_with`) with a deterministic
//! synthetic catalog (performers and names made of syllables, 60 cities, a year of dates,
//! prices), then runs one mix of queries (a performer's name, the same with a typo, a city,
//! words and a city, a date range and a status, a price range) for a fixed time, from many
//! clients at once: in process through `onsale_query::catalog::search` (the statement and its
//! plan), and through HTTP against a running `onsale serve` (what a fan gets). It can write the
//! catalog and the queries as TSV for the tantivy comparison (`loadgen/search-compare`, ADR 013).

use std::sync::Arc;
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
pub(crate) async fn measure<F, Fut>(
    clients: usize,
    seconds: u64,
    mix: Arc<Vec<SearchQuery>>,
    one: F,
) -> anyhow::Result<Measured>
where
    F: Fn(SearchQuery) -> Fut + Clone + Send + Sync + 'static,
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

/// Writes the catalog and the query mix as TSV for `search-compare`.
pub(crate) fn export(
    dir: &std::path::Path,
    docs: &[Doc],
    mix: &[SearchQuery],
) -> anyhow::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("docs.tsv"))?);
    for d in docs {
        writeln!(
            f,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            d.id,
            d.performer,
            d.name,
            d.venue,
            d.city,
            d.starts_at.timestamp(),
            d.min_price,
            d.max_price
        )?;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("queries.tsv"))?);
    let day = |s: &Option<String>, end: bool| {
        s.as_deref()
            .and_then(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
            .map(|d| {
                let d = if end { d.succ_opt().unwrap_or(d) } else { d };
                d.and_hms_opt(0, 0, 0)
                    .unwrap_or_default()
                    .and_utc()
                    .timestamp()
                    .to_string()
            })
            .unwrap_or_default()
    };
    for q in mix {
        writeln!(
            f,
            "{}\t{}\t{}\t{}\t{}",
            q.q.clone().unwrap_or_default(),
            q.city.clone().unwrap_or_default(),
            day(&q.from, false),
            day(&q.to, true),
            q.max_price.map(|p| p.to_string()).unwrap_or_default()
        )?;
    }
    Ok(())
}

/// The benchmark: fill, then in process and over HTTP, printed as a table row each.
pub(crate) async fn run(
    pool: sqlx::PgPool,
    base: Option<String>,
    shows: usize,
    clients: usize,
    seconds: u64,
    export_dir: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let docs = catalog(shows);
    fill(&pool, &docs).await?;
    println!(
        "catalog: {shows} shows written and analyzed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mix = Arc::new(queries(&docs, 2_000));
    if let Some(dir) = &export_dir {
        export(dir, &docs, &mix)?;
    }
    let sql_pool = pool.clone();
    let sql = measure(clients, seconds, mix.clone(), move |q| {
        let pool = sql_pool.clone();
        async move {
            let found = onsale_query::catalog::search(&pool, &q)
                .await
                .map_err(|e| anyhow::anyhow!("{}: {}", e.code, e.detail))?;
            Ok(found.events.len())
        }
    })
    .await?;
    println!(
        "| postgresql (in process) | {clients} | {} | {:.0} | {:.2} | {:.2} | {} |",
        sql.queries, sql.per_sec, sql.p50_ms, sql.p99_ms, sql.empty
    );
    if let Some(base) = base {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(clients)
            .build()?;
        let got = measure(clients, seconds, mix.clone(), move |q| {
            let (http, url) = (
                http.clone(),
                format!("{base}/v1/events?{}", query_string(&q)),
            );
            async move {
                let res = http.get(&url).send().await?;
                anyhow::ensure!(res.status().is_success(), "{url}: {}", res.status());
                let body: serde_json::Value = res.json().await?;
                Ok(body["events"].as_array().map_or(0, Vec::len))
            }
        })
        .await?;
        println!(
            "| postgresql (HTTP, onsale serve) | {clients} | {} | {:.0} | {:.2} | {:.2} | {} |",
            got.queries, got.per_sec, got.p50_ms, got.p99_ms, got.empty
        );
    }
    Ok(())
}
