//! What type-ahead looks in: one document per distinct performer, show name, city and venue of
//! the catalog (thousands, where the shows are a hundred thousand), each with what its shows
//! say of demand and dates, written again whenever one of its shows changes. A fan's first
//! letter then walks a few hundred names, not every show with a word that starts so.

use std::collections::BTreeSet;

use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{Column, StrColumn};
use tantivy::query::TermQuery;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, STORED,
    STRING,
};
use tantivy::{doc, DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, Searcher};
use tantivy::{SegmentOrdinal, SegmentReader, Term};

use serde::Serialize;
use utoipa::ToSchema;

use super::FOLDED;

/// What a suggestion names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SuggestionKind {
    Performer,
    Show,
    Venue,
    City,
}

pub(crate) const KINDS: [SuggestionKind; 4] = [
    SuggestionKind::Performer,
    SuggestionKind::Show,
    SuggestionKind::City,
    SuggestionKind::Venue,
];

pub(crate) fn kind_number(kind: SuggestionKind) -> u64 {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0) as u64
}

/// The names' fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameFields {
    /// The kind and the name: what a name's document is replaced by.
    pub key: Field,
    /// [`kind_number`].
    pub kind: Field,
    pub text: Field,
    pub words: Field,
    pub begun: Field,
    /// The most wanted of its shows not started: the share sold, by tenths (0-10).
    pub wanted: Field,
    /// The soonest on-sale of its shows not started (microseconds).
    pub opens: Field,
    /// The latest start of its shows: past it, the name suggests nothing.
    pub last_start: Field,
    /// A show name's best show: its id, performer and start.
    pub event_id: Field,
    pub performer: Field,
    pub starts: Field,
}

pub(crate) struct Names {
    pub fields: NameFields,
    pub reader: IndexReader,
    writer: IndexWriter,
}

/// What a name's shows say, as collected from the shows' index.
#[derive(Debug, Default)]
struct Shows {
    count: u64,
    wanted: u64,
    opens: Option<i64>,
    last_start: i64,
    /// The best show not started (most wanted, then soonest open): (wanted, -opens, doc).
    best: Option<(u64, i64, SegmentOrdinal, DocId)>,
}

/// Collects [`Shows`] of one name, shows not started by `now`.
struct OfName {
    now: i64,
}

struct SegmentOfName {
    now: i64,
    segment: SegmentOrdinal,
    starts: Column<i64>,
    on_sale: Column<i64>,
    band: Column<u64>,
    shows: Shows,
}

impl Collector for OfName {
    type Fruit = Shows;
    type Child = SegmentOfName;

    fn for_segment(
        &self,
        segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<SegmentOfName> {
        let fast = reader.fast_fields();
        Ok(SegmentOfName {
            now: self.now,
            segment,
            starts: fast.i64("starts")?,
            on_sale: fast.i64("on_sale")?,
            band: fast.u64("band")?,
            shows: Shows::default(),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, fruits: Vec<Shows>) -> tantivy::Result<Shows> {
        let mut all = Shows::default();
        for s in fruits {
            all.count += s.count;
            all.wanted = all.wanted.max(s.wanted);
            all.opens = match (all.opens, s.opens) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            all.last_start = all.last_start.max(s.last_start);
            all.best = all.best.max(s.best);
        }
        Ok(all)
    }
}

impl SegmentCollector for SegmentOfName {
    type Fruit = Shows;

    fn collect(&mut self, doc: DocId, _: Score) {
        let starts = self.starts.first(doc).unwrap_or_default();
        let s = &mut self.shows;
        s.count += 1;
        s.last_start = s.last_start.max(starts);
        if starts <= self.now {
            return;
        }
        let wanted = 10 - self.band.first(doc).unwrap_or(10).min(10);
        let opens = self.on_sale.first(doc).unwrap_or_default();
        s.wanted = s.wanted.max(wanted);
        s.opens = Some(s.opens.map_or(opens, |o| o.min(opens)));
        s.best = s.best.max(Some((wanted, -opens, self.segment, doc)));
    }

    fn harvest(self) -> Shows {
        self.shows
    }
}

fn column_text(column: Option<StrColumn>, doc: DocId) -> String {
    let mut out = String::new();
    if let Some(c) = column {
        if let Some(ord) = c.term_ords(doc).next() {
            let _ = c.ord_to_str(ord, &mut out);
        }
    }
    out
}

impl Names {
    pub(crate) fn new(analyzer: tantivy::tokenizer::TextAnalyzer) -> tantivy::Result<Self> {
        let mut sb = Schema::builder();
        let words = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(FOLDED)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let fast = || NumericOptions::default().set_fast();
        let fields = NameFields {
            key: sb.add_text_field("key", STRING),
            kind: sb.add_u64_field("kind", fast()),
            text: sb.add_text_field("text", STORED),
            words: sb.add_text_field("words", words.clone()),
            begun: sb.add_text_field("begun", words),
            wanted: sb.add_u64_field("wanted", fast()),
            opens: sb.add_i64_field("opens", fast()),
            last_start: sb.add_i64_field("last_start", fast()),
            event_id: sb.add_text_field("event_id", STORED),
            performer: sb.add_text_field("performer", STORED),
            starts: sb.add_i64_field("starts", NumericOptions::default().set_stored()),
        };
        let index = Index::create_in_ram(sb.build());
        index.tokenizers().register(FOLDED, analyzer);
        let writer = index.writer_with_num_threads(1, 15_000_000)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self {
            fields,
            reader,
            writer,
        })
    }

    /// Writes again the names of `changed` (kind, text) from what `shows` (the shows' index,
    /// committed) says of them at `now`; `key_field(kind)` is the shows' field holding a kind's
    /// name as written, `begun` every beginning of a text's words.
    pub(crate) fn rewrite(
        &mut self,
        shows: &Searcher,
        changed: &BTreeSet<(u64, String)>,
        key_field: impl Fn(SuggestionKind) -> Field,
        begun: impl Fn(&str) -> String,
        now: i64,
    ) -> tantivy::Result<()> {
        let f = self.fields;
        for (kind, text) in changed {
            let k = KINDS[*kind as usize];
            let key = format!("{kind}\u{1}{text}");
            self.writer.delete_term(Term::from_field_text(f.key, &key));
            let q = TermQuery::new(
                Term::from_field_text(key_field(k), text),
                IndexRecordOption::Basic,
            );
            let of = shows.search(&q, &OfName { now })?;
            if of.count == 0 {
                continue;
            }
            let mut d = doc!(
                f.key => key,
                f.kind => *kind,
                f.text => text.as_str(),
                f.words => text.as_str(),
                f.begun => begun(text),
                f.wanted => of.wanted,
                f.opens => of.opens.unwrap_or(i64::MAX),
                f.last_start => of.last_start,
            );
            if let (SuggestionKind::Show, Some((_, _, segment, doc))) = (k, of.best) {
                let fast = shows.segment_reader(segment).fast_fields();
                d.add_text(f.event_id, column_text(fast.str("id")?, doc));
                d.add_text(f.performer, column_text(fast.str("performer")?, doc));
                d.add_i64(f.starts, fast.i64("starts")?.first(doc).unwrap_or_default());
            }
            self.writer.add_document(d)?;
        }
        self.writer.commit()?;
        self.reader.reload()?;
        Ok(())
    }
}
