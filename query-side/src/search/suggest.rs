//! Type-ahead (`GET /v1/events/suggest?q=`): performers, shows, venues and cities whose words
//! begin as the fan's last word does (a typo forgiven from four letters), the words before it
//! whole (typos forgiven as in a search), of shows not started yet, ranked by what goes on sale
//! soonest and sells fastest. A word begun is one term of the kind's `*_begun` field; the names
//! come from the columns, grouped as the matches are collected (no stored document is read).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{Column, StrColumn};
use tantivy::query::{BooleanQuery, FuzzyTermQuery, Occur, Query};
use tantivy::schema::Field;
use tantivy::{DocId, Score, SegmentOrdinal, SegmentReader, Term};
use utoipa::ToSchema;

use super::find::{boost, constant, term, typos};
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

const DAY_US: f32 = 86_400_000_000.0;

/// How much more a word as typed weighs than one with a typo: enough that what a fan typed
/// exactly comes first, the ranking by sales and dates ordering each of the two.
const EXACT: f32 = 10.0;

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

/// The last word, begun: a beginning of a word of the kind's text (one typo forgiven from four
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

/// One kind's best: the matches ranked by match times demand (the share sold, by tenths) times
/// how soon the sale opens, grouped by the kind's text (a show: by the show), the best
/// `limit`, shows that started left out.
struct Best {
    /// The column named.
    column: &'static str,
    show: bool,
    now: i64,
    limit: usize,
}

/// A suggestion found in a segment, before its kind and weight are set.
struct Found {
    rank: f32,
    text: String,
    show: Option<(String, String, i64)>,
}

struct SegmentBest {
    show: bool,
    now: i64,
    limit: usize,
    text: Option<StrColumn>,
    id: Option<StrColumn>,
    performer: Option<StrColumn>,
    starts: Column<i64>,
    on_sale: Column<i64>,
    band: Column<u64>,
    /// The best rank per text ordinal (per doc for shows), and its doc.
    best: HashMap<u64, (f32, DocId)>,
}

impl Collector for Best {
    type Fruit = Vec<Found>;
    type Child = SegmentBest;

    fn for_segment(
        &self,
        _: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<SegmentBest> {
        let fast = reader.fast_fields();
        Ok(SegmentBest {
            show: self.show,
            now: self.now,
            limit: self.limit,
            text: fast.str(self.column)?,
            id: fast.str("id")?,
            performer: fast.str("performer")?,
            starts: fast.i64("starts")?,
            on_sale: fast.i64("on_sale")?,
            band: fast.u64("band")?,
            best: HashMap::new(),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<Found>>) -> tantivy::Result<Vec<Found>> {
        let mut all: Vec<Found> = Vec::new();
        for f in fruits.into_iter().flatten() {
            let same = |o: &Found| {
                if self.show {
                    o.show.as_ref().map(|s| &s.0) == f.show.as_ref().map(|s| &s.0)
                } else {
                    o.text.eq_ignore_ascii_case(&f.text)
                }
            };
            match all.iter_mut().find(|o| same(o)) {
                Some(o) if o.rank < f.rank => *o = f,
                Some(_) => {}
                None => all.push(f),
            }
        }
        all.sort_by(|a, b| b.rank.total_cmp(&a.rank));
        all.truncate(self.limit);
        Ok(all)
    }
}

fn text_of(column: &Option<StrColumn>, doc: DocId) -> String {
    let mut out = String::new();
    if let Some(c) = column {
        if let Some(ord) = c.term_ords(doc).next() {
            let _ = c.ord_to_str(ord, &mut out);
        }
    }
    out
}

impl SegmentCollector for SegmentBest {
    type Fruit = Vec<Found>;

    fn collect(&mut self, doc: DocId, score: Score) {
        let starts = self.starts.first(doc).unwrap_or_default();
        if starts <= self.now {
            return;
        }
        let band = self.band.first(doc).unwrap_or(10).min(10);
        let opens = self.on_sale.first(doc).unwrap_or(self.now);
        let wanted = (10 - band) as f32 / 10.0;
        let days = (opens - self.now).max(0) as f32 / DAY_US;
        let rank = score * (1.0 + wanted) * (0.5 + 1.0 / (1.0 + days / 14.0));
        let key = if self.show {
            u64::from(doc)
        } else {
            match self.text.as_ref().and_then(|c| c.term_ords(doc).next()) {
                Some(ord) => ord,
                None => return,
            }
        };
        let e = self.best.entry(key).or_insert((rank, doc));
        if e.0 < rank {
            *e = (rank, doc);
        }
    }

    fn harvest(self) -> Vec<Found> {
        let mut best: Vec<(f32, DocId)> = self.best.into_values().collect();
        best.sort_by(|a, b| b.0.total_cmp(&a.0));
        best.truncate(self.limit);
        best.into_iter()
            .map(|(rank, doc)| Found {
                rank,
                text: text_of(&self.text, doc),
                show: self.show.then(|| {
                    (
                        text_of(&self.id, doc),
                        text_of(&self.performer, doc),
                        self.starts.first(doc).unwrap_or_default(),
                    )
                }),
            })
            .collect()
    }
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
    let searcher = index.searcher();
    let mut found: Vec<(f32, Suggestion)> = Vec::new();
    // Kinds in the order a fan most often means them, when their matches rank alike: a
    // performer, a show, a city, a venue (a venue's name often holds its city's).
    for (kind, words_of, begun_of, column, weight) in [
        (
            SuggestionKind::Performer,
            f.performer,
            f.performer_begun,
            "performer",
            1.0,
        ),
        (SuggestionKind::Show, f.name, f.name_begun, "name", 0.9),
        (
            SuggestionKind::City,
            f.city_words,
            f.city_begun,
            "city",
            0.8,
        ),
        (SuggestionKind::Venue, f.venue, f.venue_begun, "venue", 0.7),
    ] {
        let mut must: Vec<(Occur, Box<dyn Query>)> = before
            .iter()
            .map(|w| (Occur::Must, whole(words_of, w)))
            .collect();
        must.push((Occur::Must, begun(begun_of, last)));
        let best = Best {
            column,
            show: kind == SuggestionKind::Show,
            now: now.timestamp_micros(),
            limit,
        };
        for s in searcher.search(&BooleanQuery::new(must), &best)? {
            let suggestion = match s.show {
                Some((id, performer, starts)) => Suggestion {
                    kind,
                    text: s.text,
                    event_id: Some(id),
                    performer: Some(performer),
                    starts_at: DateTime::from_timestamp_micros(starts),
                },
                None => Suggestion {
                    kind,
                    text: s.text,
                    event_id: None,
                    performer: None,
                    starts_at: None,
                },
            };
            found.push((s.rank * weight, suggestion));
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.truncate(limit);
    Ok(Suggestions {
        suggestions: found.into_iter().map(|(_, s)| s).collect(),
    })
}
