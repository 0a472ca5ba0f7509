//! Type-ahead (`GET /v1/events/suggest?q=`): performers, shows, venues and cities whose words
//! begin as the fan's last word does (a typo forgiven from four letters), the words before it
//! whole (typos forgiven as in a search), of shows not started yet, ranked by what goes on sale
//! soonest and sells fastest.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, FuzzyTermQuery, Occur, Query, RangeQuery};
use tantivy::schema::{Field, Value};
use tantivy::{DocId, Score, SegmentReader, TantivyDocument, Term};
use utoipa::ToSchema;

use super::find::{boost, term, typos};
use super::SearchIndex;

/// What a suggestion names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SuggestionKind {
    Performer,
    Show,
    Venue,
    City,
}

/// One suggestion: a show (its id, performer and start beside its name), or a performer, venue
/// or city to search for.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Suggestion {
    pub kind: SuggestionKind,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub performer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Suggestions {
    pub suggestions: Vec<Suggestion>,
}

/// Shows looked at per kind before the distinct names are taken.
const LOOK: usize = 40;
const DAY_US: f32 = 86_400_000_000.0;

/// How much more a word as typed weighs than one with a typo: enough that what a fan typed
/// exactly comes first, the ranking by sales and dates ordering each of the two.
const EXACT: f32 = 10.0;

/// A typed word, whole: itself, or with its typos.
fn whole(field: Field, word: &str) -> Box<dyn Query> {
    let mut any: Vec<(Occur, Box<dyn Query>)> =
        vec![(Occur::Should, boost(term(field, word), 2.0))];
    if typos(word) > 0 {
        let q = FuzzyTermQuery::new(Term::from_field_text(field, word), typos(word), true);
        any.push((Occur::Should, Box::new(q)));
    }
    Box::new(BooleanQuery::new(any))
}

/// The last word, begun: a word of the field starting with it (one typo forgiven from four
/// letters).
fn begun(field: Field, word: &str) -> Box<dyn Query> {
    let d = u8::from(word.chars().count() >= 4);
    let exact = FuzzyTermQuery::new_prefix(Term::from_field_text(field, word), 0, true);
    let mut any: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Should, boost(exact, EXACT))];
    if d > 0 {
        let q = FuzzyTermQuery::new_prefix(Term::from_field_text(field, word), d, true);
        any.push((Occur::Should, Box::new(q)));
    }
    Box::new(BooleanQuery::new(any))
}

/// Up to `limit` suggestions for `q` at `now`.
pub fn suggest(
    index: &SearchIndex,
    q: &str,
    limit: usize,
    now: DateTime<Utc>,
) -> tantivy::Result<Suggestions> {
    let words = index.words(q);
    let Some((last, before)) = words.split_last() else {
        return Ok(Suggestions {
            suggestions: Vec::new(),
        });
    };
    let f = *index.fields();
    let now_us = now.timestamp_micros();
    let searcher = index.searcher();
    let mut found: Vec<(f32, Suggestion)> = Vec::new();
    // Kinds in the order a fan most often means them, when their matches rank alike: a
    // performer, a show, a city, a venue (a venue's name often holds its city's).
    for (kind, field, weight) in [
        (SuggestionKind::Performer, f.performer, 1.0),
        (SuggestionKind::Show, f.name, 0.9),
        (SuggestionKind::City, f.city_words, 0.8),
        (SuggestionKind::Venue, f.venue, 0.7),
    ] {
        let mut must: Vec<(Occur, Box<dyn Query>)> = before
            .iter()
            .map(|w| (Occur::Must, whole(field, w)))
            .collect();
        must.push((Occur::Must, begun(field, last)));
        must.push((
            Occur::Must,
            Box::new(RangeQuery::new(
                std::ops::Bound::Excluded(Term::from_field_i64(f.starts, now_us)),
                std::ops::Bound::Unbounded,
            )),
        ));
        let query = BooleanQuery::new(must);
        // Most wanted (the share sold, by tenths) and soonest on sale (or on sale now).
        let ranked = TopDocs::with_limit(LOOK).tweak_score(move |segment: &SegmentReader| {
            let fast = segment.fast_fields();
            let band = fast.u64("band").ok();
            let on_sale = fast.i64("on_sale").ok();
            move |doc: DocId, score: Score| {
                let band = band.as_ref().and_then(|c| c.first(doc)).unwrap_or(10);
                let opens = on_sale
                    .as_ref()
                    .and_then(|c| c.first(doc))
                    .unwrap_or(now_us);
                let wanted = (10 - band.min(10)) as f32 / 10.0;
                let days = (opens - now_us).max(0) as f32 / DAY_US;
                score * (1.0 + wanted) * (0.5 + 1.0 / (1.0 + days / 14.0))
            }
        });
        for (rank, addr) in searcher.search(&query, &ranked)? {
            let d: TantivyDocument = searcher.doc(addr)?;
            let text = |field| {
                d.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let s = match kind {
                SuggestionKind::Show => Suggestion {
                    kind,
                    text: text(f.name),
                    event_id: Some(text(f.id)),
                    performer: Some(text(f.performer)),
                    starts_at: d
                        .get_first(f.starts)
                        .and_then(|v| v.as_i64())
                        .and_then(DateTime::from_timestamp_micros),
                },
                _ => Suggestion {
                    kind,
                    text: text(if kind == SuggestionKind::City {
                        f.city
                    } else {
                        field
                    }),
                    event_id: None,
                    performer: None,
                    starts_at: None,
                },
            };
            let same = |o: &Suggestion| {
                o.kind == s.kind
                    && if s.kind == SuggestionKind::Show {
                        o.event_id == s.event_id
                    } else {
                        o.text.eq_ignore_ascii_case(&s.text)
                    }
            };
            if !found.iter().any(|(_, o)| same(o)) {
                found.push((rank * weight, s));
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.truncate(limit);
    Ok(Suggestions {
        suggestions: found.into_iter().map(|(_, s)| s).collect(),
    })
}
