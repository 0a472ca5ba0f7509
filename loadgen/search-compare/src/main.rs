//! Builds an in-memory tantivy index of the catalog `docs.tsv` and runs `queries.tsv` from
//! many threads for a fixed time, as `onsale-loadgen bench-search` runs them on PostgreSQL:
//! words of the performer and the name (each word fuzzy, one edit, as the trigram side
//! tolerates one typo), a city, a date range, a price bound; top 20 by score, then start.
//! Usage: search-compare DIR THREADS SECONDS

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, FuzzyTermQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{IndexRecordOption, Schema, Value, FAST, INDEXED, STORED, STRING, TEXT};
use tantivy::{doc, Index, TantivyDocument, Term};

fn main() -> tantivy::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map_or("/tmp/searchbench", String::as_str));
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let seconds: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20);

    let mut sb = Schema::builder();
    let id = sb.add_text_field("id", STRING | STORED);
    let words = sb.add_text_field("words", TEXT);
    let place = sb.add_text_field("place", TEXT);
    let city = sb.add_text_field("city", STRING);
    let starts = sb.add_i64_field("starts", INDEXED | FAST);
    let min_price = sb.add_i64_field("min_price", INDEXED | FAST);
    let schema = sb.build();
    let index = Index::create_in_ram(schema);
    let t = Instant::now();
    let mut writer = index.writer(200_000_000)?;
    let docs = std::fs::read_to_string(dir.join("docs.tsv"))?;
    let mut n = 0;
    for line in docs.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 8 {
            continue;
        }
        writer.add_document(doc!(
            id => f[0],
            words => format!("{} {}", f[1], f[2]),
            place => format!("{} {}", f[3], f[4]),
            city => f[4].to_lowercase(),
            starts => f[5].parse::<i64>().unwrap_or(0),
            min_price => f[6].parse::<i64>().unwrap_or(0),
        ))?;
        n += 1;
    }
    writer.commit()?;
    let reader = index.reader()?;
    println!("tantivy: {n} shows indexed in {:.1} s", t.elapsed().as_secs_f64());

    let queries: Vec<Box<dyn Query>> = std::fs::read_to_string(dir.join("queries.tsv"))?
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let get = |i: usize| f.get(i).copied().unwrap_or("");
            let mut must: Vec<(Occur, Box<dyn Query>)> = Vec::new();
            if !get(0).is_empty() {
                let terms: Vec<(Occur, Box<dyn Query>)> = get(0)
                    .split_whitespace()
                    .map(|w| {
                        let w = w.to_lowercase();
                        let fuzzy: Box<dyn Query> = Box::new(FuzzyTermQuery::new(
                            Term::from_field_text(words, &w),
                            1,
                            true,
                        ));
                        let exact: Box<dyn Query> = Box::new(TermQuery::new(
                            Term::from_field_text(place, &w),
                            IndexRecordOption::Basic,
                        ));
                        (
                            Occur::Should,
                            Box::new(BooleanQuery::new(vec![(Occur::Should, fuzzy), (Occur::Should, exact)]))
                                as Box<dyn Query>,
                        )
                    })
                    .collect();
                must.push((Occur::Must, Box::new(BooleanQuery::new(terms))));
            }
            if !get(1).is_empty() {
                must.push((
                    Occur::Must,
                    Box::new(TermQuery::new(
                        Term::from_field_text(city, &get(1).to_lowercase()),
                        IndexRecordOption::Basic,
                    )),
                ));
            }
            if let (Ok(from), Ok(to)) = (get(2).parse::<i64>(), get(3).parse::<i64>()) {
                must.push((
                    Occur::Must,
                    Box::new(RangeQuery::new(
                        std::ops::Bound::Included(Term::from_field_i64(starts, from)),
                        std::ops::Bound::Excluded(Term::from_field_i64(starts, to)),
                    )),
                ));
            }
            if let Ok(max) = get(4).parse::<i64>() {
                must.push((
                    Occur::Must,
                    Box::new(RangeQuery::new(
                        std::ops::Bound::Unbounded,
                        std::ops::Bound::Included(Term::from_field_i64(min_price, max)),
                    )),
                ));
            }
            Box::new(BooleanQuery::new(must)) as Box<dyn Query>
        })
        .collect();
    let queries = Arc::new(queries);
    let until = Instant::now() + Duration::from_secs(seconds);
    let empty = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|c| {
            let (queries, reader, empty) = (queries.clone(), reader.clone(), empty.clone());
            std::thread::spawn(move || {
                let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
                let searcher = reader.searcher();
                let mut i = c * 97;
                while Instant::now() < until {
                    let q = &queries[i % queries.len()];
                    i += 1;
                    let t = Instant::now();
                    let top = searcher.search(q.as_ref(), &TopDocs::with_limit(21)).expect("search");
                    for (_, addr) in &top {
                        let d: TantivyDocument = searcher.doc(*addr).expect("doc");
                        std::hint::black_box(d.get_first(id).and_then(|v| v.as_str()).map(str::len));
                    }
                    if top.is_empty() {
                        empty.fetch_add(1, Ordering::Relaxed);
                    }
                    h.record(t.elapsed().as_micros() as u64).expect("record");
                }
                h
            })
        })
        .collect();
    let mut all = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    for h in handles {
        all.add(h.join().expect("thread")).expect("add");
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "| tantivy (in process, in memory) | {threads} | {} | {:.0} | {:.2} | {:.2} | {} |",
        all.len(),
        all.len() as f64 / elapsed,
        all.value_at_quantile(0.5) as f64 / 1000.0,
        all.value_at_quantile(0.99) as f64 / 1000.0,
        empty.load(Ordering::Relaxed)
    );
    Ok(())
}
