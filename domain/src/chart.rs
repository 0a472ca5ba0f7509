//! Where a venue's parts are drawn: the stage, each section's outline and each row's seats
//! along a line or an arc, on a plane of [`CHART_SIZE`] units a side (x to the right, y down,
//! as a screen draws). A venue may carry one (checked against its layout: every section, every
//! row, in order); one without gets [`Chart::generated`], so every venue draws.
//!
//! A row's seats sit evenly along it: seat `i` of `n` (from 0) at `t = (i + ½) / n` of the way
//! from `from` to `to`, along the straight line, or along the circular arc whose middle bows
//! `bend` units off it, to the left of the direction `from -> to` when positive
//! ([`RowLine::seat`], [`RowLine::at`]). The web app places them with the same formula
//! (docs/api.md).

use serde::{Deserialize, Serialize};

use crate::error::ShowError;
use crate::layout::{SectionLayout, VenueLayout};

/// The side of the chart's square plane.
pub const CHART_SIZE: f64 = 10_000.0;
/// The most corners a section's outline may have.
pub const MAX_OUTLINE_POINTS: usize = 64;

/// A point of the chart: `[x, y]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point(pub f64, pub f64);

/// In the OpenAPI document an array of exactly two numbers (the derive would make a tuple
/// struct an array of arrays).
impl utoipa::PartialSchema for Point {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type,
        };
        ArrayBuilder::new()
            .items(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double))),
            )
            .min_items(Some(2))
            .max_items(Some(2))
            .description(Some("A point of the chart: [x, y]."))
            .into()
    }
}

impl utoipa::ToSchema for Point {}

/// A rectangle of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// One row's seats: along the curve from `from` to `to`, bowing `bend` off the straight line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RowLine {
    pub row: String,
    pub from: Point,
    pub to: Point,
    /// How far the row's middle bows off the straight line from `from` to `to` (to its left
    /// when positive); 0 or absent: a straight row.
    #[serde(default)]
    pub bend: f64,
}

impl RowLine {
    /// Seat `i` (from 0) of the row's `n`: evenly along the row, half a gap from each end.
    pub fn seat(&self, i: u32, n: u32) -> Point {
        self.at((f64::from(i) + 0.5) / f64::from(n.max(1)))
    }

    /// The curve's point at `t` (0: `from`, 1: `to`): along the straight line, or along the
    /// circular arc through `from` and `to` whose middle is `bend` off the chord, at an even
    /// pace (equal steps of `t` are equal lengths of the row).
    pub fn at(&self, t: f64) -> Point {
        let Point(x0, y0) = self.from;
        let Point(x1, y1) = self.to;
        let (dx, dy) = (x1 - x0, y1 - y0);
        let len = dx.hypot(dy);
        if self.bend.abs() < 1e-9 || len < 1e-9 {
            return Point(x0 + t * dx, y0 + t * dy);
        }
        // Left of from -> to, with y down, is (dy, -dx).
        let (nx, ny) = (dy / len, -dx / len);
        let (mx, my) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
        let (h, s) = (len / 2.0, self.bend);
        let radius = (h * h + s * s) / (2.0 * s.abs());
        // The centre is on the other side of the chord from the arc's middle (or on it).
        let off = s - s.signum() * radius;
        let (cx, cy) = (mx + nx * off, my + ny * off);
        let start = (y0 - cy).atan2(x0 - cx);
        let middle = (my + ny * s - cy).atan2(mx + nx * s - cx);
        let mut half = middle - start;
        if half > std::f64::consts::PI {
            half -= 2.0 * std::f64::consts::PI;
        } else if half < -std::f64::consts::PI {
            half += 2.0 * std::f64::consts::PI;
        }
        let angle = start + 2.0 * half * t;
        Point(cx + radius * angle.cos(), cy + radius * angle.sin())
    }
}

/// One section: its outline and, unless it is general admission, its rows in the layout's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SectionChart {
    pub section: String,
    /// The section's outline, a polygon of 3 to 64 corners: drawn under its seats; a
    /// general-admission section is drawn as this area with its count.
    #[schema(min_items = 3, max_items = 64)]
    pub outline: Vec<Point>,
    /// A reserved section's rows, as its layout lists them; none for general admission.
    #[serde(default)]
    pub rows: Vec<RowLine>,
}

/// Where the venue's parts are drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Chart {
    pub stage: Rect,
    /// Every section of the layout, in its order.
    pub sections: Vec<SectionChart>,
}

fn invalid(why: String) -> ShowError {
    ShowError::Invalid(why)
}

fn on_plane(what: &str, p: Point) -> Result<(), ShowError> {
    let inside = |v: f64| v.is_finite() && (0.0..=CHART_SIZE).contains(&v);
    if inside(p.0) && inside(p.1) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must lie on the chart: 0 to {CHART_SIZE} each way"
        )))
    }
}

impl Chart {
    /// Checks the chart against the venue's layout: every section once and in order, each
    /// reserved section's rows in order, general admission without rows, every point on the
    /// plane, every row's curve within it.
    pub fn check(&self, layout: &VenueLayout) -> Result<(), ShowError> {
        let Rect {
            x,
            y,
            width,
            height,
        } = self.stage;
        on_plane("the stage", Point(x, y))?;
        on_plane("the stage", Point(x + width, y + height))?;
        if !(width > 0.0 && height > 0.0) {
            return Err(invalid("the stage must have a width and a height".into()));
        }
        let names: Vec<&str> = layout
            .sections()
            .iter()
            .map(|s| s.section.as_str())
            .collect();
        let drawn: Vec<&str> = self.sections.iter().map(|s| s.section.as_str()).collect();
        if names != drawn {
            return Err(invalid(format!(
                "the chart must draw the venue's sections in its order: {}",
                names.join(", ")
            )));
        }
        for (chart, section) in self.sections.iter().zip(layout.sections()) {
            check_section(chart, section)?;
        }
        Ok(())
    }

    /// A chart for a venue that has none: the stage at the top, general-admission floors in
    /// front of it, and the reserved sections in rings facing it, best first (nearest), each
    /// row an arc.
    pub fn generated(layout: &VenueLayout) -> Self {
        generate(layout)
    }

    /// Every reserved seat's place, in the layout's order, with its section (general-admission
    /// units have none). For a chart that passed [`Chart::check`] against `layout`.
    pub fn seats<'a>(
        &'a self,
        layout: &'a VenueLayout,
    ) -> impl Iterator<Item = (usize, Point)> + 'a {
        self.sections
            .iter()
            .zip(layout.sections())
            .enumerate()
            .flat_map(|(k, (chart, section))| {
                chart
                    .rows
                    .iter()
                    .zip(&section.rows)
                    .flat_map(move |(line, row)| {
                        (0..row.seats).map(move |i| (k, line.seat(i, row.seats)))
                    })
            })
    }
}

fn check_section(chart: &SectionChart, section: &SectionLayout) -> Result<(), ShowError> {
    let name = &section.section;
    if chart.outline.len() < 3 || chart.outline.len() > MAX_OUTLINE_POINTS {
        return Err(invalid(format!(
            "section {name}'s outline must have 3 to {MAX_OUTLINE_POINTS} corners"
        )));
    }
    for p in &chart.outline {
        on_plane(&format!("section {name}'s outline"), *p)?;
    }
    if section.general_admission {
        if !chart.rows.is_empty() {
            return Err(invalid(format!(
                "section {name} is general admission: it is drawn as its outline, without rows"
            )));
        }
        return Ok(());
    }
    let rows: Vec<&str> = section.rows.iter().map(|r| r.row.as_str()).collect();
    let drawn: Vec<&str> = chart.rows.iter().map(|r| r.row.as_str()).collect();
    if rows != drawn {
        return Err(invalid(format!(
            "section {name}'s rows must be drawn in its order: {}",
            rows.join(", ")
        )));
    }
    for line in &chart.rows {
        let what = format!("row {} of section {name}", line.row);
        on_plane(&what, line.from)?;
        on_plane(&what, line.to)?;
        let chord = (line.to.0 - line.from.0).hypot(line.to.1 - line.from.1);
        if !line.bend.is_finite() || line.bend.abs() > chord {
            return Err(invalid(format!(
                "{what} may bow at most its own length off the straight line"
            )));
        }
        // The curve's middle (the farthest it bows) must stay on the plane too.
        on_plane(&what, line.at(0.5))?;
    }
    Ok(())
}

/// The generated chart's measures before it is scaled onto the plane: a seat's width along its
/// row, the depth of a row, the aisle between sections and rings, the angle a ring spans.
const SEAT: f64 = 10.0;
const ROW: f64 = 12.0;
const AISLE: f64 = 24.0;
const FAN: f64 = 140.0 * std::f64::consts::PI / 180.0;
/// The chart's margin around what it draws.
const MARGIN: f64 = 200.0;

/// A point `r` from the stage's front middle, `angle` off straight ahead (to the right when
/// positive), in the unscaled plane (y grows away from the stage).
fn polar(angle: f64, r: f64) -> Point {
    Point(r * angle.sin(), r * angle.cos())
}

fn generate(layout: &VenueLayout) -> Chart {
    let stage = Rect {
        x: -200.0,
        y: -100.0,
        width: 400.0,
        height: 80.0,
    };
    let mut sections: Vec<Option<SectionChart>> = vec![None; layout.sections().len()];
    // General-admission floors side by side in front of the stage, each about square, four
    // square units a place.
    let floors: Vec<(usize, &SectionLayout)> = layout
        .sections()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.general_admission)
        .collect();
    let sides: Vec<f64> = floors
        .iter()
        .map(|(_, s)| (f64::from(s.capacity()) * 4.0).sqrt().max(40.0))
        .collect();
    let row_width: f64 = sides.iter().sum::<f64>() + AISLE * sides.len().saturating_sub(1) as f64;
    let mut x = -row_width / 2.0;
    let front = 20.0;
    for ((k, s), side) in floors.iter().zip(&sides) {
        sections[*k] = Some(SectionChart {
            section: s.section.clone(),
            outline: vec![
                Point(x, front),
                Point(x + side, front),
                Point(x + side, front + side),
                Point(x, front + side),
            ],
            rows: Vec::new(),
        });
        x += side + AISLE;
    }
    let deepest = sides.iter().copied().fold(0.0, f64::max);
    let mut radius = front + deepest + AISLE + 40.0;
    // The reserved sections in rings, best (first) nearest, each ring spanning at most FAN.
    let mut ring: Vec<(usize, &SectionLayout)> = Vec::new();
    let mut ring_angle = 0.0;
    let reserved = layout
        .sections()
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.general_admission);
    let width =
        |s: &SectionLayout| f64::from(s.rows.iter().map(|r| r.seats).max().unwrap_or(1)) * SEAT;
    for (k, s) in reserved {
        // A section wider than a ring at this radius moves the ring out until it fits.
        if ring.is_empty() {
            radius = radius.max((width(s) + AISLE) / FAN);
        }
        if !ring.is_empty() && ring_angle + span(s, radius) > FAN {
            radius = place_ring(&ring, radius, &mut sections) + AISLE;
            ring.clear();
            ring_angle = 0.0;
            radius = radius.max((width(s) + AISLE) / FAN);
        }
        ring_angle += span(s, radius);
        ring.push((k, s));
    }
    if !ring.is_empty() {
        place_ring(&ring, radius, &mut sections);
    }
    let sections: Vec<SectionChart> = sections.into_iter().flatten().collect();
    fit(Chart { stage, sections })
}

/// The angle a section takes in a ring starting `radius` from the stage: its widest row's at
/// that row's radius, and an aisle.
fn span(s: &SectionLayout, radius: f64) -> f64 {
    let widest = s
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| f64::from(row.seats) * SEAT / (radius + (i as f64 + 0.5) * ROW))
        .fold(0.0, f64::max);
    widest + AISLE / radius
}

/// Places a ring's sections side by side across the fan, starting `radius` from the stage;
/// returns the ring's outer radius.
fn place_ring(
    ring: &[(usize, &SectionLayout)],
    radius: f64,
    sections: &mut [Option<SectionChart>],
) -> f64 {
    let angles: Vec<f64> = ring.iter().map(|(_, s)| span(s, radius)).collect();
    let mut start = -angles.iter().sum::<f64>() / 2.0;
    let mut outer = radius;
    for ((k, s), angle) in ring.iter().zip(&angles) {
        let middle = start + angle / 2.0;
        let rows: Vec<RowLine> = s
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let r = radius + (i as f64 + 0.5) * ROW;
                let half = f64::from(row.seats) * SEAT / 2.0 / r;
                RowLine {
                    row: row.row.clone(),
                    from: polar(middle - half, r),
                    to: polar(middle + half, r),
                    // The arc bows away from the stage: to the right of left -> right.
                    bend: -r * (1.0 - half.cos()),
                }
            })
            .collect();
        let (inner, far) = (radius, radius + s.rows.len() as f64 * ROW);
        let half = (angle - AISLE / radius) / 2.0;
        let mut outline: Vec<Point> = (0..=8)
            .map(|j| polar(middle - half + half * 2.0 * f64::from(j) / 8.0, inner))
            .collect();
        outline.extend(
            (0..=8)
                .rev()
                .map(|j| polar(middle - half + half * 2.0 * f64::from(j) / 8.0, far)),
        );
        sections[*k] = Some(SectionChart {
            section: s.section.clone(),
            outline,
            rows,
        });
        outer = outer.max(far);
        start += angle;
    }
    outer
}

/// Scales and moves a chart drawn around the stage onto the plane, keeping its proportions.
fn fit(chart: Chart) -> Chart {
    let Rect {
        x,
        y,
        width,
        height,
    } = chart.stage;
    let mut points = vec![Point(x, y), Point(x + width, y + height)];
    for s in &chart.sections {
        points.extend(&s.outline);
        for r in &s.rows {
            points.extend([r.from, r.to, r.at(0.5)]);
        }
    }
    let (mut lo, mut hi) = (Point(f64::MAX, f64::MAX), Point(f64::MIN, f64::MIN));
    for p in &points {
        lo = Point(lo.0.min(p.0), lo.1.min(p.1));
        hi = Point(hi.0.max(p.0), hi.1.max(p.1));
    }
    let span = (hi.0 - lo.0).max(hi.1 - lo.1).max(1.0);
    let scale = (CHART_SIZE - 2.0 * MARGIN) / span;
    // Centred across, from the top down.
    let shift = Point((CHART_SIZE - (hi.0 - lo.0) * scale) / 2.0, MARGIN);
    let at = |p: Point| {
        Point(
            (p.0 - lo.0) * scale + shift.0,
            (p.1 - lo.1) * scale + shift.1,
        )
    };
    Chart {
        stage: {
            let corner = at(Point(x, y));
            Rect {
                x: corner.0,
                y: corner.1,
                width: width * scale,
                height: height * scale,
            }
        },
        sections: chart
            .sections
            .into_iter()
            .map(|s| SectionChart {
                section: s.section,
                outline: s.outline.into_iter().map(at).collect(),
                rows: s
                    .rows
                    .into_iter()
                    .map(|r| RowLine {
                        row: r.row,
                        from: at(r.from),
                        to: at(r.to),
                        bend: r.bend * scale,
                    })
                    .collect(),
            })
            .collect(),
    }
}
