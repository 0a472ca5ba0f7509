//! The venue chart: a generated chart fits every layout (checked, on the plane, no two seats on
//! top of each other), and a chart that does not match its layout is refused.

use std::collections::HashMap;

use onsale_domain::chart::{Chart, Point, RowLine, CHART_SIZE};
use onsale_domain::{RowLayout, SectionLayout, VenueLayout};
use proptest::prelude::*;

fn layout() -> impl Strategy<Value = VenueLayout> {
    let section = prop_oneof![
        3 => prop::collection::vec(1u32..=60, 1..=10).prop_map(|rows| (rows, 0u32)),
        1 => (1u32..=3_000).prop_map(|capacity| (Vec::new(), capacity)),
    ];
    prop::collection::vec((section, 0usize..3), 1..=8).prop_map(|sections| {
        let sections = sections
            .into_iter()
            .enumerate()
            .map(|(i, ((rows, capacity), tier))| {
                let (name, tier) = (format!("S{i}"), ["A", "B", "C"][tier].to_owned());
                if rows.is_empty() {
                    SectionLayout::general_admission(name, tier, capacity)
                } else {
                    SectionLayout {
                        section: name,
                        price_tier: tier,
                        rows: rows
                            .into_iter()
                            .enumerate()
                            .map(|(r, seats)| RowLayout {
                                row: format!("R{r}"),
                                seats,
                            })
                            .collect(),
                        general_admission: false,
                    }
                }
            })
            .collect();
        VenueLayout::parse(sections).expect("a valid layout")
    })
}

/// The smallest distance between two seats of the chart, found through a grid of cells `cell`
/// wide (pairs farther apart than a cell are not looked at).
fn closest(points: &[Point], cell: f64) -> f64 {
    let mut cells: HashMap<(i64, i64), Vec<Point>> = HashMap::new();
    let key = |p: Point| ((p.0 / cell).floor() as i64, (p.1 / cell).floor() as i64);
    let mut best = f64::MAX;
    for &p in points {
        let (cx, cy) = key(p);
        for dx in -1..=1 {
            for dy in -1..=1 {
                for q in cells.get(&(cx + dx, cy + dy)).into_iter().flatten() {
                    best = best.min((p.0 - q.0).hypot(p.1 - q.1));
                }
            }
        }
        cells.entry((cx, cy)).or_default().push(p);
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_generated_chart_fits_every_layout_and_no_two_seats_overlap(layout in layout()) {
        let chart = Chart::generated(&layout);
        prop_assert_eq!(chart.check(&layout), Ok(()));
        let seats: Vec<Point> = chart.seats(&layout).map(|(_, p)| p).collect();
        let count: u32 = layout.sections().iter().filter(|s| !s.general_admission).map(SectionLayout::capacity).sum();
        prop_assert_eq!(seats.len() as u32, count);
        for p in &seats {
            prop_assert!((0.0..=CHART_SIZE).contains(&p.0) && (0.0..=CHART_SIZE).contains(&p.1));
        }
        // Neighbours of a row sit a seat apart; no seat of any row or section is much nearer
        // another than that.
        let pitch = chart.sections.iter().flat_map(|s| &s.rows).zip(layout.sections().iter().flat_map(|s| &s.rows))
            .filter(|(_, r)| r.seats > 1)
            .map(|(line, r)| { let (a, b) = (line.seat(0, r.seats), line.seat(1, r.seats)); (a.0 - b.0).hypot(a.1 - b.1) })
            .fold(f64::MAX, f64::min);
        if pitch < f64::MAX {
            prop_assert!(closest(&seats, pitch * 2.0) > pitch * 0.5, "two seats overlap");
        }
    }

    #[test]
    fn a_chart_that_does_not_draw_its_layout_is_refused(layout in layout(), what in 0usize..4) {
        let mut chart = Chart::generated(&layout);
        let n = chart.sections.len();
        match what {
            // A section missing.
            0 => { chart.sections.pop(); }
            // Sections out of order (or one twice, when there is only one).
            1 if n > 1 => chart.sections.swap(0, n - 1),
            1 => { let again = chart.sections[0].clone(); chart.sections.push(again); }
            // A point off the plane.
            2 => chart.sections[0].outline[0] = Point(CHART_SIZE + 1.0, 0.0),
            // A floor with rows, or a row missing from a reserved section.
            _ => {
                let s = &mut chart.sections[0];
                if s.rows.is_empty() {
                    s.rows.push(RowLine { row: "R0".into(), from: Point(1.0, 1.0), to: Point(2.0, 1.0), bend: 0.0 });
                } else {
                    s.rows.pop();
                }
            }
        }
        prop_assert!(chart.check(&layout).is_err());
    }
}

#[test]
fn a_straight_row_spaces_its_seats_evenly_and_a_bent_one_bows_to_its_left() {
    let line = RowLine {
        row: "A".into(),
        from: Point(0.0, 0.0),
        to: Point(100.0, 0.0),
        bend: 0.0,
    };
    let xs: Vec<f64> = (0..4).map(|i| line.seat(i, 4).0).collect();
    assert_eq!(xs, vec![12.5, 37.5, 62.5, 87.5]);
    // Left of +x is up (y down): a positive bend lifts the middle by it.
    let bent = RowLine { bend: 10.0, ..line };
    let middle = bent.at(0.5);
    assert!((middle.0 - 50.0).abs() < 1e-9 && (middle.1 + 10.0).abs() < 1e-9);
}
