//! One pass over a query's matches: the page after a cursor, in the results' order (best score,
//! then soonest, then the id's key), and the facets of every match (city, month, price band,
//! status), the status decided per show at the time of the search and filtered on here.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use onsale_edge::EventStatus;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::{Column, StrColumn};
use tantivy::{DocAddress, DocId, Score, SegmentOrdinal, SegmentReader};

/// Where a show stands in the results' order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rank {
    pub score: f32,
    pub starts: i64,
    pub key: u64,
}

impl Rank {
    /// `Less` when `self` comes first.
    pub(crate) fn order(&self, other: &Rank) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.starts.cmp(&other.starts))
            .then(self.key.cmp(&other.key))
    }
}

/// A hit kept in a heap whose top is the last in the results' order.
#[derive(Debug, Clone, Copy)]
struct Kept(Rank, DocAddress);

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Kept {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.order(&other.0)
    }
}

/// The price bands of a show's cheapest seat (cents, lower bound inclusive), as the facet and
/// the `priceBand` filter name them.
pub(crate) const PRICE_BANDS: [(&str, i64, i64); 5] = [
    ("UNDER_25", 0, 2_500),
    ("25_TO_50", 2_500, 5_000),
    ("50_TO_100", 5_000, 10_000),
    ("100_TO_200", 10_000, 20_000),
    ("200_AND_OVER", 20_000, i64::MAX),
];

fn price_band(cents: i64) -> usize {
    PRICE_BANDS
        .iter()
        .position(|(_, lo, hi)| (*lo..*hi).contains(&cents))
        .unwrap_or(0)
}

const STATUSES: [EventStatus; 4] = [
    EventStatus::Scheduled,
    EventStatus::OnSale,
    EventStatus::SoldOut,
    EventStatus::Started,
];

/// The status of a show with `band` of seats left at `now` (microseconds): the one rule,
/// `EventStatus::at`, the band standing for the count (0 is none).
pub(crate) fn status(now: i64, starts: i64, on_sale: i64, band: u64) -> EventStatus {
    EventStatus::at(now, starts, on_sale, Some(i32::from(band > 0)))
}

/// Counts by facet of every match.
#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub city: HashMap<String, u64>,
    pub month: HashMap<u64, u64>,
    pub price: [u64; PRICE_BANDS.len()],
    pub status: [u64; STATUSES.len()],
    pub total: u64,
}

impl Counts {
    pub(crate) fn statuses(&self) -> impl Iterator<Item = (EventStatus, u64)> + '_ {
        STATUSES.iter().copied().zip(self.status.iter().copied())
    }
}

/// The collector: the first `limit` matches after `after` in the results' order, and the
/// counts of every match with `only` status (all when `None`); scores count only if `scored`.
pub(crate) struct Hits {
    pub limit: usize,
    pub after: Option<Rank>,
    pub now: i64,
    pub only: Option<EventStatus>,
    pub scored: bool,
}

pub(crate) struct SegmentHits {
    segment: SegmentOrdinal,
    limit: usize,
    after: Option<Rank>,
    now: i64,
    only: Option<EventStatus>,
    scored: bool,
    starts: Column<i64>,
    on_sale: Column<i64>,
    min_price: Column<i64>,
    band: Column<u64>,
    month: Column<u64>,
    key: Column<u64>,
    city: Option<StrColumn>,
    city_counts: Vec<u64>,
    kept: BinaryHeap<Kept>,
    counts: Counts,
}

impl Collector for Hits {
    type Fruit = (Vec<(Rank, DocAddress)>, Counts);
    type Child = SegmentHits;

    fn for_segment(
        &self,
        segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<SegmentHits> {
        let fast = reader.fast_fields();
        let city = fast.str("city")?;
        let terms = city.as_ref().map_or(0, |c| c.num_terms());
        Ok(SegmentHits {
            segment,
            limit: self.limit,
            after: self.after,
            now: self.now,
            only: self.only,
            scored: self.scored,
            starts: fast.i64("starts")?,
            on_sale: fast.i64("on_sale")?,
            min_price: fast.i64("min_price")?,
            band: fast.u64("band")?,
            month: fast.u64("month")?,
            key: fast.u64("key")?,
            city,
            city_counts: vec![0; terms],
            kept: BinaryHeap::new(),
            counts: Counts::default(),
        })
    }

    fn requires_scoring(&self) -> bool {
        self.scored
    }

    fn merge_fruits(
        &self,
        fruits: Vec<(Vec<(Rank, DocAddress)>, Counts)>,
    ) -> tantivy::Result<Self::Fruit> {
        let mut all = Vec::new();
        let mut counts = Counts::default();
        for (kept, c) in fruits {
            all.extend(kept);
            for (city, n) in c.city {
                *counts.city.entry(city).or_default() += n;
            }
            for (m, n) in c.month {
                *counts.month.entry(m).or_default() += n;
            }
            for (i, n) in c.price.iter().enumerate() {
                counts.price[i] += n;
            }
            for (i, n) in c.status.iter().enumerate() {
                counts.status[i] += n;
            }
            counts.total += c.total;
        }
        all.sort_by(|a, b| a.0.order(&b.0));
        all.truncate(self.limit);
        Ok((all, counts))
    }
}

impl SegmentCollector for SegmentHits {
    type Fruit = (Vec<(Rank, DocAddress)>, Counts);

    fn collect(&mut self, doc: DocId, score: Score) {
        let starts = self.starts.first(doc).unwrap_or_default();
        let on_sale = self.on_sale.first(doc).unwrap_or_default();
        let band = self.band.first(doc).unwrap_or_default();
        let status = status(self.now, starts, on_sale, band);
        if self.only.is_some_and(|s| s != status) {
            return;
        }
        let c = &mut self.counts;
        c.total += 1;
        c.status[STATUSES.iter().position(|s| *s == status).unwrap_or(0)] += 1;
        c.price[price_band(self.min_price.first(doc).unwrap_or_default())] += 1;
        *c.month
            .entry(self.month.first(doc).unwrap_or_default())
            .or_default() += 1;
        if let Some(city) = &self.city {
            for ord in city.term_ords(doc) {
                if let Some(n) = self.city_counts.get_mut(ord as usize) {
                    *n += 1;
                }
            }
        }
        let rank = Rank {
            score: if self.scored { score } else { 0.0 },
            starts,
            key: self.key.first(doc).unwrap_or_default(),
        };
        if self
            .after
            .is_some_and(|after| rank.order(&after) != Ordering::Greater)
        {
            return;
        }
        self.kept
            .push(Kept(rank, DocAddress::new(self.segment, doc)));
        if self.kept.len() > self.limit {
            self.kept.pop();
        }
    }

    fn harvest(mut self) -> Self::Fruit {
        if let Some(city) = &self.city {
            let mut name = String::new();
            for (ord, n) in self.city_counts.iter().enumerate() {
                if *n > 0 && city.ord_to_str(ord as u64, &mut name).unwrap_or(false) {
                    *self.counts.city.entry(name.clone()).or_default() += n;
                }
            }
        }
        let kept = self.kept.into_iter().map(|Kept(r, a)| (r, a)).collect();
        (kept, self.counts)
    }
}
