//! A catalog search on the index: the words of `q` matched against the performer, the show's
//! name, the venue and the city (exact words first, then one or two typos, then a word begun),
//! the filters as terms and ranges, one page after a cursor, the facets of every match, and
//! "did you mean" when nothing matched.

use std::ops::Bound;

use chrono::{DateTime, Utc};
use onsale_projections::catalog::Search;
use serde::Serialize;
use tantivy::query::{
    AllQuery, BooleanQuery, BoostQuery, ConstScoreQuery, FuzzyTermQuery, Occur, Query, RangeQuery,
    TermQuery,
};
use tantivy::schema::{Field, IndexRecordOption, Value};
use tantivy::{TantivyDocument, Term};
use utoipa::ToSchema;

use super::hits::{status, Hits, Rank, PRICE_BANDS};
use super::SearchIndex;
use crate::summary::EventSummary;

/// Where an index page stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct IndexCursor(pub Rank);

/// One value of a facet and how many of the matches have it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Facet {
    pub value: String,
    pub count: u64,
}

/// How the matches of a search spread (every match, not one page's): by city (the 20 with
/// most), by month of the start (`YYYY-MM`), by band of the cheapest price and by status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Facets {
    pub city: Vec<Facet>,
    pub month: Vec<Facet>,
    /// `UNDER_25`, `25_TO_50`, `50_TO_100`, `100_TO_200`, `200_AND_OVER` (the cheapest seat, in
    /// the currency's units).
    pub price_band: Vec<Facet>,
    pub status: Vec<Facet>,
}

/// What the index found: a page, where the next starts, the facets, and a name like what was
/// typed when nothing matched.
#[derive(Debug)]
pub(crate) struct Found {
    pub events: Vec<EventSummary>,
    pub next: Option<IndexCursor>,
    pub facets: Facets,
    pub did_you_mean: Option<String>,
}

/// Edits a typed word may be from a name's: none under four letters, one under seven, else two.
pub(crate) fn typos(word: &str) -> u8 {
    match word.chars().count() {
        0..=3 => 0,
        4..=6 => 1,
        _ => 2,
    }
}

pub(crate) fn boost(q: impl Query, by: f32) -> Box<dyn Query> {
    Box::new(BoostQuery::new(Box::new(q), by))
}

pub(crate) fn term(field: Field, word: &str) -> TermQuery {
    TermQuery::new(
        Term::from_field_text(field, word),
        IndexRecordOption::WithFreqs,
    )
}

/// One typed word against the four texts: the word itself, the word with typos in the
/// performer or the name, the word begun (at least three letters) in the performer or the name.
fn word_query(index: &SearchIndex, word: &str) -> Box<dyn Query> {
    let f = index.fields();
    let mut any: Vec<(Occur, Box<dyn Query>)> = vec![
        (Occur::Should, boost(term(f.performer, word), 4.0)),
        (Occur::Should, boost(term(f.name, word), 3.0)),
        (Occur::Should, boost(term(f.venue, word), 1.0)),
        (Occur::Should, boost(term(f.city_words, word), 1.0)),
    ];
    let d = typos(word);
    if d > 0 {
        let q = FuzzyTermQuery::new(Term::from_field_text(f.names, word), d, true);
        any.push((Occur::Should, boost(q, 2.0)));
    }
    if word.chars().count() >= 3 {
        any.push((Occur::Should, constant(term(f.performer_begun, word), 1.0)));
        any.push((Occur::Should, constant(term(f.name_begun, word), 0.8)));
    }
    Box::new(BooleanQuery::new(any))
}

/// `q`, every match scored `score`.
pub(crate) fn constant(q: impl Query, score: f32) -> Box<dyn Query> {
    Box::new(ConstScoreQuery::new(Box::new(q), score))
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Starts, prices: a range of an i64 field (`None` when neither bound is set).
fn range_i64(
    field: Field,
    lower: Bound<i64>,
    upper: Bound<i64>,
) -> Option<(Occur, Box<dyn Query>)> {
    if matches!((lower, upper), (Bound::Unbounded, Bound::Unbounded)) {
        return None;
    }
    let term = |b: Bound<i64>| b.map(|v| Term::from_field_i64(field, v));
    Some((
        Occur::Must,
        Box::new(RangeQuery::new(term(lower), term(upper))),
    ))
}

/// The filters of `s` (all but the status, which the collector decides at the search's time).
fn filters(index: &SearchIndex, s: &Search) -> Vec<(Occur, Box<dyn Query>)> {
    let f = index.fields();
    let mut must: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    if let Some(city) = &s.city {
        let q = TermQuery::new(
            Term::from_field_text(f.city_key, &city.to_lowercase()),
            IndexRecordOption::Basic,
        );
        must.push((Occur::Must, Box::new(q)));
    }
    let (from, to) = (s.from.map(micros), s.to.map(micros));
    must.extend(range_i64(
        f.starts,
        from.map_or(Bound::Unbounded, Bound::Included),
        to.map_or(Bound::Unbounded, Bound::Excluded),
    ));
    // A price at or above `min_price`: the dearest seat is; at or below `max_price`: the
    // cheapest is.
    must.extend(range_i64(
        f.max_price,
        s.min_price.map_or(Bound::Unbounded, Bound::Included),
        Bound::Unbounded,
    ));
    must.extend(range_i64(
        f.min_price,
        Bound::Unbounded,
        s.max_price.map_or(Bound::Unbounded, Bound::Included),
    ));
    if let Some((lo, hi)) = s.cheapest {
        must.extend(range_i64(
            f.min_price,
            Bound::Included(lo),
            Bound::Excluded(hi),
        ));
    }
    must
}

fn summary(index: &SearchIndex, d: &TantivyDocument, now: i64) -> EventSummary {
    let f = index.fields();
    let text = |field| {
        d.get_first(field)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let number = |field| d.get_first(field).and_then(|v| v.as_i64()).unwrap_or(0);
    let time = |field| DateTime::from_timestamp_micros(number(field)).unwrap_or_default();
    let band = d.get_first(f.band).and_then(|v| v.as_u64()).unwrap_or(0);
    EventSummary {
        event_id: text(f.id),
        name: text(f.name),
        performer: text(f.performer),
        venue_id: text(f.venue_id),
        venue_name: text(f.venue),
        city: text(f.city),
        starts_at: time(f.starts),
        on_sale_at: time(f.on_sale),
        status: status(now, number(f.starts), number(f.on_sale), band),
        min_price_cents: number(f.min_price),
        max_price_cents: number(f.max_price),
        waiting_room: d
            .get_first(f.waiting_room)
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        score: 0.0,
    }
}

fn facets(c: &super::hits::Counts) -> Facets {
    let mut city: Vec<Facet> = c
        .city
        .iter()
        .map(|(v, n)| Facet {
            value: v.clone(),
            count: *n,
        })
        .collect();
    city.sort_by(|a, b| b.count.cmp(&a.count).then(a.value.cmp(&b.value)));
    city.truncate(20);
    let mut months: Vec<(&u64, &u64)> = c.month.iter().collect();
    months.sort();
    Facets {
        city,
        month: months
            .into_iter()
            .map(|(m, n)| Facet {
                value: format!("{}-{:02}", m / 100, m % 100),
                count: *n,
            })
            .collect(),
        price_band: PRICE_BANDS
            .iter()
            .zip(c.price)
            .filter(|(_, n)| *n > 0)
            .map(|((name, _, _), n)| Facet {
                value: (*name).to_owned(),
                count: n,
            })
            .collect(),
        status: c
            .statuses()
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| Facet {
                value: s.as_str().to_owned(),
                count: n,
            })
            .collect(),
    }
}

/// One page of `s` after `after` at `now`.
pub(crate) fn find(
    index: &SearchIndex,
    s: &Search,
    after: Option<IndexCursor>,
    now: DateTime<Utc>,
) -> tantivy::Result<Found> {
    let words = s.q.as_deref().map(|q| index.words(q)).unwrap_or_default();
    let mut must = filters(index, s);
    for w in &words {
        must.push((Occur::Must, word_query(index, w)));
    }
    let query: Box<dyn Query> = if must.is_empty() {
        Box::new(AllQuery)
    } else {
        Box::new(BooleanQuery::new(must))
    };
    let limit = usize::try_from(s.limit).unwrap_or(1);
    let only = s
        .status
        .as_deref()
        .and_then(|st| onsale_edge::EventStatus::try_from(st.to_owned()).ok());
    let hits = Hits {
        limit: limit + 1,
        after: after.map(|c| c.0),
        now: micros(now),
        only,
        scored: !words.is_empty(),
    };
    let searcher = index.searcher();
    let (mut page, counts) = searcher.search(query.as_ref(), &hits)?;
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|(r, _)| IndexCursor(*r))
    } else {
        None
    };
    let mut events = Vec::with_capacity(page.len());
    for (rank, addr) in &page {
        let d: TantivyDocument = searcher.doc(*addr)?;
        let mut e = summary(index, &d, micros(now));
        e.score = f64::from(rank.score);
        events.push(e);
    }
    let did_you_mean = if counts.total == 0 && after.is_none() && !words.is_empty() {
        did_you_mean(index, &words)?
    } else {
        None
    };
    Ok(Found {
        events,
        next,
        facets: facets(&counts),
        did_you_mean,
    })
}

/// The performer, else the show's name, nearest to what was typed: every word of four letters
/// or more up to two typos away, any of them.
fn did_you_mean(index: &SearchIndex, words: &[String]) -> tantivy::Result<Option<String>> {
    let f = index.fields();
    let searcher = index.searcher();
    for field in [f.performer, f.name] {
        let near: Vec<(Occur, Box<dyn Query>)> = words
            .iter()
            .filter(|w| w.chars().count() >= 4)
            .map(|w| {
                let q = FuzzyTermQuery::new(Term::from_field_text(field, w), 2, true);
                (Occur::Should, Box::new(q) as Box<dyn Query>)
            })
            .collect();
        if near.is_empty() {
            return Ok(None);
        }
        let top = searcher.search(
            &BooleanQuery::new(near),
            &tantivy::collector::TopDocs::with_limit(1),
        )?;
        if let Some((_, addr)) = top.first() {
            let d: TantivyDocument = searcher.doc(*addr)?;
            return Ok(d
                .get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_owned));
        }
    }
    Ok(None)
}
