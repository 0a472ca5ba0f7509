//! The catalog's search index (issue 55, ADR 033): each query-side process keeps one tantivy
//! index of every show in memory, built from the catalog projection's documents
//! (`onsale_projections::catalog::documents_since`: a show's facts and its band of seats left,
//! folded from the topic once, in the projector) and following them from its position, so a
//! rebuild is the same path as living: a new index starts at 0. Until it has read every
//! document once the catalog answers from PostgreSQL (`crate::catalog`), never after.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use onsale_projections::catalog::Document;
use onsale_telemetry::supervise::Loops;
use sqlx::PgPool;
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, FAST,
    INDEXED, STORED, STRING,
};
use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer,
};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, Term};

mod find;
pub(crate) mod hits;
mod names;
mod suggest;

pub(crate) use find::{find, IndexCursor};
pub use find::{Facet, Facets};
pub use names::SuggestionKind;
pub use suggest::{suggest, Suggestion, Suggestions};

/// The analyzer of every text field and of what a fan types: words, lower case, accents
/// folded ("Beyoncé" is "beyonce"), nothing longer than 40 bytes.
const FOLDED: &str = "folded";

/// The index's fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    pub id: Field,
    /// Text: what a fan types is matched against these.
    pub performer: Field,
    pub name: Field,
    pub venue: Field,
    pub city_words: Field,
    /// The performer's and the name's words together: what a typo is looked for in.
    pub names: Field,
    /// Every beginning (up to [`BEGUN_MAX`] letters) of each word of the performer and the
    /// name: a word begun is one term to look up, not a walk of the dictionary.
    pub performer_begun: Field,
    pub name_begun: Field,
    /// The performer, the name and the venue as written, whole: the terms a name's shows are
    /// found by (`names.rs`).
    pub performer_key: Field,
    pub name_key: Field,
    pub venue_key: Field,
    /// The city as written (stored, a whole term, and a fast column the city facet counts) and
    /// lower-cased (the city filter's term).
    pub city: Field,
    pub city_key: Field,
    pub venue_id: Field,
    pub waiting_room: Field,
    /// Microseconds since the epoch.
    pub starts: Field,
    pub on_sale: Field,
    pub min_price: Field,
    pub max_price: Field,
    /// The band of seats left: 0 sold out, else the tenths still available (1-10).
    pub band: Field,
    /// The month of the start, `YYYYMM` (the month facet).
    pub month: Field,
    /// A number of the show's id: the last tie-break of the order, so pages never overlap.
    pub key: Field,
}

fn schema() -> (Schema, Fields) {
    let mut sb = Schema::builder();
    let text = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(FOLDED)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    // Stored and a column as written too: type-ahead names its suggestions from the columns.
    let shown = text.clone().set_fast(None);
    let words = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(FOLDED)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let number = || {
        NumericOptions::default()
            .set_indexed()
            .set_fast()
            .set_stored()
    };
    let fields = Fields {
        id: sb.add_text_field("id", STRING | STORED | FAST),
        performer: sb.add_text_field("performer", shown.clone()),
        name: sb.add_text_field("name", shown.clone()),
        venue: sb.add_text_field("venue", shown),
        city_words: sb.add_text_field("city_words", text),
        names: sb.add_text_field("names", words.clone()),
        performer_begun: sb.add_text_field("performer_begun", words.clone()),
        name_begun: sb.add_text_field("name_begun", words),
        performer_key: sb.add_text_field("performer_key", STRING),
        name_key: sb.add_text_field("name_key", STRING),
        venue_key: sb.add_text_field("venue_key", STRING),
        city: sb.add_text_field("city", STRING | STORED | FAST),
        city_key: sb.add_text_field("city_key", STRING),
        venue_id: sb.add_text_field("venue_id", STORED),
        waiting_room: sb.add_bool_field("waiting_room", STORED),
        starts: sb.add_i64_field("starts", number()),
        on_sale: sb.add_i64_field("on_sale", number()),
        min_price: sb.add_i64_field("min_price", number()),
        max_price: sb.add_i64_field("max_price", number()),
        band: sb.add_u64_field("band", INDEXED | FAST | STORED),
        month: sb.add_u64_field("month", FAST),
        key: sb.add_u64_field("key", FAST),
    };
    (sb.build(), fields)
}

/// The longest beginning of a word held for type-ahead.
pub(crate) const BEGUN_MAX: usize = 12;

/// The month of an instant, `YYYYMM`.
fn month_of(t: chrono::DateTime<chrono::Utc>) -> u64 {
    use chrono::Datelike;
    u64::from(t.year().unsigned_abs()) * 100 + u64::from(t.month())
}

/// The order's last tie-break for a show id.
pub(crate) fn key_of(id: &str) -> u64 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(id.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

struct Inner {
    /// What searches see: reloaded once the names of what it shows are written.
    reader: IndexReader,
    /// What the names are written from: reloaded at each commit.
    staging: IndexReader,
    writer: Mutex<IndexWriter>,
    /// The distinct names type-ahead looks in, written after the shows they come from.
    names: Mutex<names::Names>,
    names_reader: IndexReader,
    name_fields: names::NameFields,
    fields: Fields,
    analyzer: TextAnalyzer,
    /// Every document written by a transaction below this has been taken in.
    position: AtomicU64,
    /// Every document has been read at least once: searches may be answered here.
    ready: AtomicBool,
}

/// A process's search index of the catalog (cheap to clone: one index).
#[derive(Clone)]
pub struct SearchIndex(Arc<Inner>);

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("position", &self.position())
            .field("ready", &self.ready())
            .finish()
    }
}

impl SearchIndex {
    /// An empty index at position 0 (not ready).
    pub fn new() -> tantivy::Result<Self> {
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        let analyzer = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(AsciiFoldingFilter)
            .build();
        index.tokenizers().register(FOLDED, analyzer.clone());
        let names = names::Names::new(analyzer.clone())?;
        // One indexing thread: a document comes when a show is scheduled or its band moves.
        let writer = index.writer_with_num_threads(1, 32_000_000)?;
        let reader: IndexReader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let staging = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(Self(Arc::new(Inner {
            reader,
            staging,
            writer: Mutex::new(writer),
            names_reader: names.reader.clone(),
            name_fields: names.fields,
            names: Mutex::new(names),
            fields,
            analyzer,
            position: AtomicU64::new(0),
            ready: AtomicBool::new(false),
        })))
    }

    pub fn ready(&self) -> bool {
        self.0.ready.load(Ordering::Acquire)
    }

    pub fn position(&self) -> u64 {
        self.0.position.load(Ordering::Acquire)
    }

    /// Shows held.
    pub fn documents(&self) -> u64 {
        self.0.reader.searcher().num_docs()
    }

    pub(crate) fn fields(&self) -> &Fields {
        &self.0.fields
    }

    pub(crate) fn searcher(&self) -> Searcher {
        self.0.reader.searcher()
    }

    pub(crate) fn name_fields(&self) -> &names::NameFields {
        &self.0.name_fields
    }

    pub(crate) fn name_searcher(&self) -> Searcher {
        self.0.names_reader.searcher()
    }

    /// The words of `text` as the index holds them.
    pub(crate) fn words(&self, text: &str) -> Vec<String> {
        let mut analyzer = self.0.analyzer.clone();
        let mut stream = analyzer.token_stream(text);
        let mut words = Vec::new();
        while stream.advance() {
            words.push(stream.token().text.clone());
        }
        words
    }

    /// Every beginning of every word of `text`, folded, as one text.
    fn begun(&self, text: &str) -> String {
        let mut all = String::new();
        for w in self.words(text) {
            for (i, c) in w.char_indices().take(BEGUN_MAX) {
                all.push_str(&w[..i + c.len_utf8()]);
                all.push(' ');
            }
        }
        all
    }

    /// Takes `docs` in (each replacing the show's document), visible to the next search and,
    /// written just before, their names to the next type-ahead.
    pub fn apply(&self, docs: &[Document]) -> tantivy::Result<()> {
        let f = self.0.fields;
        let mut writer = self.0.writer.lock().unwrap_or_else(|p| p.into_inner());
        for d in docs {
            writer.delete_term(Term::from_field_text(f.id, &d.event_id));
            writer.add_document(doc!(
                f.id => d.event_id.as_str(),
                f.performer => d.performer.as_str(),
                f.name => d.name.as_str(),
                f.venue => d.venue_name.as_str(),
                f.city_words => d.city.as_str(),
                f.performer_key => d.performer.as_str(),
                f.name_key => d.name.as_str(),
                f.venue_key => d.venue_name.as_str(),
                f.names => format!("{} {}", d.performer, d.name),
                f.performer_begun => self.begun(&d.performer),
                f.name_begun => self.begun(&d.name),
                f.month => month_of(d.starts_at),
                f.city => d.city.as_str(),
                f.city_key => d.city.to_lowercase(),
                f.venue_id => d.venue_id.as_str(),
                f.waiting_room => d.waiting_room,
                f.starts => d.starts_at.timestamp_micros(),
                f.on_sale => d.on_sale_at.timestamp_micros(),
                f.min_price => d.min_price_cents,
                f.max_price => d.max_price_cents,
                f.band => u64::try_from(d.seats_band).unwrap_or(0),
                f.key => key_of(&d.event_id),
            ))?;
        }
        writer.commit()?;
        drop(writer);
        self.0.staging.reload()?;
        let changed: BTreeSet<(u64, String)> = docs
            .iter()
            .flat_map(|d| {
                [
                    (SuggestionKind::Performer, &d.performer),
                    (SuggestionKind::Show, &d.name),
                    (SuggestionKind::City, &d.city),
                    (SuggestionKind::Venue, &d.venue_name),
                ]
                .map(|(k, t)| (names::kind_number(k), t.clone()))
            })
            .collect();
        let key = |k| match k {
            SuggestionKind::Performer => f.performer_key,
            SuggestionKind::Show => f.name_key,
            SuggestionKind::City => f.city,
            SuggestionKind::Venue => f.venue_key,
        };
        self.0
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rewrite(
                &self.0.staging.searcher(),
                &changed,
                key,
                |t| self.begun(t),
                chrono::Utc::now().timestamp_micros(),
            )?;
        self.0.reader.reload()?;
        Ok(())
    }

    /// Reads the documents written since its position on `reads` once, and takes them in.
    /// `Ok(n)`: how many it took.
    pub async fn catch_up(&self, reads: &PgPool) -> anyhow::Result<usize> {
        let (docs, upto) =
            onsale_projections::catalog::documents_since(reads, self.position()).await?;
        let n = docs.len();
        if n > 0 {
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.apply(&docs)).await??;
            metrics::counter!(onsale_telemetry::metrics::SEARCH_INDEX_UPDATES_TOTAL)
                .increment(n as u64);
            metrics::gauge!(onsale_telemetry::metrics::SEARCH_INDEX_DOCUMENTS)
                .set(self.documents() as f64);
        }
        self.0.position.store(upto, Ordering::Release);
        if !self.0.ready.swap(true, Ordering::AcqRel) {
            tracing::info!(
                shows = self.documents(),
                "the search index has read the catalog"
            );
        }
        Ok(n)
    }

    /// Follows the catalog's documents on `reads` every `every` on `loops` ("search index").
    pub fn follow(&self, reads: PgPool, every: Duration, loops: &Loops) {
        let me = self.clone();
        let stop = loops.stop().clone();
        loops.spawn("search index", move || {
            let (me, reads, stop) = (me.clone(), reads.clone(), stop.clone());
            async move {
                let mut failing = false;
                loop {
                    match me.catch_up(&reads).await {
                        Ok(_) => failing = false,
                        Err(e) if !failing => {
                            failing = true;
                            tracing::warn!(error = %e, "the search index could not read the catalog");
                        }
                        Err(_) => {}
                    }
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(every) => {}
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests;
