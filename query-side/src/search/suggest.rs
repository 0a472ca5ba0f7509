//! Type-ahead (`GET /v1/events/suggest?q=`): performers, shows, venues and cities whose words
//! begin as the fan's last word does (a typo forgiven from four letters), the words before it
//! whole (typos forgiven as in a search), with a show not started yet, ranked by what goes on
//! sale soonest and sells fastest. Looked up among the distinct names (`names.rs`), one search
//! for every kind.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, FuzzyTermQuery, Occur, Query};
use tantivy::schema::{Field, Value};
use tantivy::{DocId, Score, SegmentReader, TantivyDocument, Term};
use utoipa::ToSchema;

use super::find::{boost, constant, term, typos};
use super::names::{SuggestionKind, KINDS};
use super::SearchIndex;

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

const DAY_US: f32 = 86_400_000_000.0;

/// How much more a word as typed weighs than one with a typo: enough that what a fan typed
/// exactly comes first, the ranking by sales and dates ordering each of the two.
const EXACT: f32 = 10.0;

/// Kinds in the order a fan most often means them, when their matches rank alike (in
/// [`KINDS`]' order): a performer, a show, a city, a venue (a venue's name often holds its
/// city's).
const WEIGHT: [f32; 4] = [1.0, 0.9, 0.8, 0.7];

/// A typed word, whole: itself, or with its typos.
fn whole(field: Field, word: &str) -> Box<dyn Query> {
    let mut any: Vec<(Occur, Box<dyn Query>)> =
        vec![(Occur::Should, boost(term(field, word), EXACT))];
    if typos(word) > 0 {
        let q = FuzzyTermQuery::new(Term::from_field_text(field, word), typos(word), true);
        any.push((Occur::Should, Box::new(q)));
    }
    Box::new(BooleanQuery::new(any))
}

/// The last word, begun: a beginning of a word of the name (one typo forgiven from four
/// letters).
fn begun(field: Field, word: &str) -> Box<dyn Query> {
    let mut any: Vec<(Occur, Box<dyn Query>)> =
        vec![(Occur::Should, constant(term(field, word), EXACT))];
    if word.chars().count() >= 4 {
        let q = FuzzyTermQuery::new(Term::from_field_text(field, word), 1, true);
        any.push((Occur::Should, constant(q, 1.0)));
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
    let f = index.name_fields();
    let mut must: Vec<(Occur, Box<dyn Query>)> = before
        .iter()
        .map(|w| (Occur::Must, whole(f.words, w)))
        .collect();
    must.push((Occur::Must, begun(f.begun, last)));
    let now_us = now.timestamp_micros();
    // Most wanted (the share sold, by tenths) and soonest on sale (or on sale now); a name
    // whose shows have all started, none.
    let ranked = TopDocs::with_limit(limit).tweak_score(move |segment: &SegmentReader| {
        let fast = segment.fast_fields();
        let (kind, wanted, opens, last_start) = (
            fast.u64("kind").ok(),
            fast.u64("wanted").ok(),
            fast.i64("opens").ok(),
            fast.i64("last_start").ok(),
        );
        move |doc: DocId, score: Score| {
            let kind = kind.as_ref().and_then(|c| c.first(doc)).unwrap_or(0);
            let last = last_start.as_ref().and_then(|c| c.first(doc)).unwrap_or(0);
            if last <= now_us {
                return f32::NEG_INFINITY;
            }
            let wanted = wanted
                .as_ref()
                .and_then(|c| c.first(doc))
                .unwrap_or(0)
                .min(10);
            let opens = opens.as_ref().and_then(|c| c.first(doc)).unwrap_or(now_us);
            let days = (opens - now_us).max(0) as f32 / DAY_US;
            let weight = WEIGHT.get(kind as usize).copied().unwrap_or(0.5);
            score * (1.0 + wanted as f32 / 10.0) * (0.5 + 1.0 / (1.0 + days / 14.0)) * weight
        }
    });
    let searcher = index.name_searcher();
    let mut suggestions = Vec::new();
    for (rank, addr) in searcher.search(&BooleanQuery::new(must), &ranked)? {
        if rank == f32::NEG_INFINITY {
            continue;
        }
        let d: TantivyDocument = searcher.doc(addr)?;
        let text = |field| {
            d.get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let fast = searcher.segment_reader(addr.segment_ord).fast_fields();
        let kind = fast.u64("kind")?.first(addr.doc_id).unwrap_or(0);
        let kind = KINDS
            .get(kind as usize)
            .copied()
            .unwrap_or(SuggestionKind::Performer);
        let is_show = kind == SuggestionKind::Show;
        suggestions.push(Suggestion {
            kind,
            text: text(f.text).unwrap_or_default(),
            event_id: text(f.event_id).filter(|_| is_show),
            performer: text(f.performer).filter(|_| is_show),
            starts_at: d
                .get_first(f.starts)
                .and_then(|v| v.as_i64())
                .and_then(DateTime::from_timestamp_micros)
                .filter(|_| is_show),
        });
    }
    Ok(Suggestions { suggestions })
}
