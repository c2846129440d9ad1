//! The timeline chart (plotters): one panel per device with its live bytes per memory kind,
//! what NVML measured for the process, out-of-memory failures as red lines, and NVTX ranges
//! (shaded) and marks (grey lines) when the trace has them; above them, all devices together
//! when there are several. The same drawing goes to SVG or to a PNG.
//!
//! Each bucket is drawn at its highest value (a step), with a light band down to its lowest:
//! however long the trace, a peak is never averaged away.

use std::sync::Once;

use gpumemprof_format::MemKind;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use crate::timeline::{SeriesKey, Timeline};
use crate::units;

/// DejaVu Sans, printable ASCII only (see assets/DejaVuSans-LICENSE.txt): text metrics for
/// SVG and glyphs for PNG without depending on the machine's fonts.
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");

const WIDTH: u32 = 1400;
const TITLE_HEIGHT: u32 = 60;
const PANEL_HEIGHT: u32 = 320;
/// The row above each plot with its caption and legend.
const LEGEND_HEIGHT: u32 = 30;
/// Failures drawn one by one at most; more are drawn as lines without labels.
const LABELLED_OOMS: usize = 12;

const OOM_RED: RGBColor = RGBColor(214, 39, 40);
const NVML_GREY: RGBColor = RGBColor(90, 90, 90);
const MARK_GREY: RGBColor = RGBColor(150, 150, 150);
const RANGE_FILL: RGBColor = RGBColor(255, 221, 120);
const CAPACITY_RED: RGBColor = RGBColor(200, 80, 80);

/// A device's memory size as the trace knows it: NVML's, else the largest a failed
/// allocation read.
fn capacity_of(t: &Timeline, device: i32) -> Option<u64> {
    let nvml = (t.device_totals.iter())
        .find(|(d, _)| *d == device)
        .map(|(_, c)| *c);
    let failed = (t.ooms.iter().filter(|o| o.device == device))
        .map(|o| o.mem_total)
        .max();
    nvml.or(failed).filter(|&c| c > 0)
}

fn kind_color(kind: MemKind) -> RGBColor {
    match kind {
        MemKind::Device => RGBColor(31, 119, 180),
        MemKind::Managed => RGBColor(255, 127, 14),
        MemKind::PinnedHost => RGBColor(44, 160, 44),
        _ => RGBColor(148, 103, 189),
    }
}

/// The chart's size in pixels for this timeline.
pub fn size(t: &Timeline) -> (u32, u32) {
    (WIDTH, TITLE_HEIGHT + PANEL_HEIGHT * panels(t).len() as u32)
}

/// `None`: all devices together; `Some(d)`: one device.
fn panels(t: &Timeline) -> Vec<Option<i32>> {
    let devices = t.devices();
    let mut p = Vec::new();
    if devices.len() != 1 {
        p.push(None);
    }
    p.extend(devices.into_iter().map(Some));
    p
}

/// The chart as an SVG document.
pub fn svg(t: &Timeline, title: &str) -> Result<String, String> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(t)).into_drawing_area();
        draw(&root, t, title).map_err(|e| format!("drawing the timeline: {e}"))?;
        root.present()
            .map_err(|e| format!("drawing the timeline: {e}"))?;
    }
    Ok(out)
}

/// The chart as a PNG image.
pub fn png(t: &Timeline, title: &str) -> Result<Vec<u8>, String> {
    register_font();
    let (w, h) = size(t);
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, t, title).map_err(|e| format!("drawing the timeline: {e}"))?;
        root.present()
            .map_err(|e| format!("drawing the timeline: {e}"))?;
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .write_header()
        .and_then(|mut w| w.write_image_data(&rgb))
        .map_err(|e| format!("encoding the PNG: {e}"))?;
    Ok(out)
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Cannot fail for the bundled font; if it did, drawing text reports the error.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// A unit that keeps the panel's numbers short: the largest of B, KiB, MiB, GiB, TiB
/// that the highest value reaches.
fn unit_for(max: u64) -> (&'static str, f64) {
    const UNITS: [(&str, u32); 5] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10), ("B", 0)];
    for (name, shift) in UNITS {
        if max >= 1u64 << shift {
            return (name, (1u64 << shift) as f64);
        }
    }
    ("B", 1.0)
}

/// Decimals that tell ticks apart on an axis from 0 to `end` (about ten ticks).
fn decimals(end: f64) -> usize {
    let step = end / 10.0;
    if step >= 1.0 || step <= 0.0 || !step.is_finite() {
        0
    } else {
        (-step.log10()).ceil().min(9.0) as usize
    }
}

/// `12`, `2.5`, `0.0125`: a tick value with at most `decimals`, without trailing zeros.
fn tick(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

type DrawResult<E> = Result<(), DrawingAreaErrorKind<E>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    t: &Timeline,
    title: &str,
) -> DrawResult<DB::ErrorType> {
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(TITLE_HEIGHT);
    top.draw(&Text::new(
        title.to_string(),
        (20, 12),
        ("sans-serif", 20).into_font().color(&BLACK),
    ))?;
    let note = format!(
        "each point is the highest live value in its {} interval; the band goes down to the lowest",
        duration(t.width_ns)
    );
    top.draw(&Text::new(
        note,
        (20, 38),
        ("sans-serif", 13).into_font().color(&NVML_GREY),
    ))?;
    let panels = panels(t);
    if panels.is_empty() {
        return body.draw(&Text::new(
            "no GPU memory was allocated in this trace".to_string(),
            (20, 20),
            ("sans-serif", 16).into_font(),
        ));
    }
    let areas = body.split_evenly((panels.len(), 1));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, t, panel)?;
    }
    Ok(())
}

/// Seconds to show on the x axis (never 0 wide).
fn x_end(t: &Timeline) -> f64 {
    (t.end_ns.max(t.origin_ns.saturating_add(1_000)) as f64) / 1e9
}

/// Seconds where the x axis starts: 0, or the start of a window.
fn x_start(t: &Timeline) -> f64 {
    t.origin_ns as f64 / 1e9
}

fn duration(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", tick(ns as f64 / 1e3, 3))
    } else if ns < 1_000_000_000 {
        format!("{} ms", tick(ns as f64 / 1e6, 3))
    } else {
        format!("{} s", tick(ns as f64 / 1e9, 3))
    }
}

/// One legend entry: colour, text, dashed.
type LegendItem = (RGBColor, String, bool);

/// A step line through `points` (in time order): each value holds until the next point,
/// the last until `x_end`.
fn steps(points: &[(f64, f64)], x_end: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        out.push((x, y));
        let next = points.get(i + 1).map_or(x_end.max(x), |p| p.0);
        out.push((next, y));
    }
    out
}

/// Rows of labels at the top of a panel.
const LABEL_ROWS: usize = 4;
/// About how wide a character of the 11-pixel label font is, and how wide the plot is, in
/// pixels (the figure's width less its margins and the y-axis labels).
const LABEL_CHAR_PX: f64 = 6.5;
const PLOT_PX: f64 = (WIDTH - 12 - 24 - 72) as f64;

/// Where each label `(x, text)` (in time order) goes: its row from the top, and whether it
/// sits left of its line (when it would run past the right edge `x_end`). A label takes
/// the first row where it does not overlap the labels already there, else the row whose
/// last label ends first.
fn place_labels(labels: &[(f64, String)], x_start: f64, x_end: f64) -> Vec<(usize, bool)> {
    let mut ends = [f64::NEG_INFINITY; LABEL_ROWS];
    labels
        .iter()
        .map(|(x, text)| {
            let span = x_end - x_start;
            let width = text.chars().count() as f64 * LABEL_CHAR_PX / PLOT_PX * span;
            let left = x + width > x_end;
            let (start, end) = if left {
                (x - width, *x)
            } else {
                (*x, x + width)
            };
            let row = (0..LABEL_ROWS)
                .find(|&r| ends[r] <= start)
                .unwrap_or_else(|| {
                    (0..LABEL_ROWS)
                        .min_by(|&a, &b| ends[a].total_cmp(&ends[b]))
                        .unwrap_or(0)
                });
            ends[row] = end;
            (row, left)
        })
        .collect()
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t: &Timeline,
    device: Option<i32>,
) -> DrawResult<DB::ErrorType> {
    let live: Vec<_> = t
        .series
        .iter()
        .filter(|s| match (s.key, device) {
            (SeriesKey::Total, None) => true,
            (SeriesKey::Live(d, _), Some(want)) => d == want,
            (SeriesKey::Nvml(d), Some(want)) => d == want,
            _ => false,
        })
        .collect();
    let max = live.iter().map(|s| s.max()).max().unwrap_or(0).max(1);
    // The device's capacity (NVML's, else what a failed allocation read): drawn when it
    // is within 4 times the highest value, else named in the legend only.
    let capacity = device.and_then(|d| capacity_of(t, d));
    let drawn = capacity.filter(|&c| c <= max.saturating_mul(4));
    let top = drawn.map_or(max, |c| c.max(max));
    let (unit, scale) = unit_for(top);
    // Headroom above the highest value for the failure and mark labels.
    let y_end = top as f64 / scale * 1.15;
    let (x_start, x_end) = (x_start(t), x_end(t));
    let kinds = device.and_then(|d| t.kinds.iter().find(|k| k.device == d));
    // The kinds of memory get a legend row of their own.
    let rows = if kinds.is_some() { 2 } else { 1 };
    let (strip, plot) = area.split_vertically(LEGEND_HEIGHT * rows);
    let mut chart = ChartBuilder::on(&plot)
        .margin_left(12)
        .margin_right(24)
        .margin_bottom(8)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(x_start..x_end, 0f64..y_end)?;
    // Enough decimals to tell the ticks of a narrow window apart.
    let x_decimals = decimals(x_end - x_start).max(decimals(x_end));
    let y_decimals = decimals(y_end);
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(format!("live ({unit})"))
        .x_label_formatter(&|v| tick(*v, x_decimals))
        .y_label_formatter(&|v| tick(*v, y_decimals))
        .light_line_style(RGBColor(238, 238, 238))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .draw()?;

    let secs = |ns: u64| ns as f64 / 1e9;
    let mut legend: Vec<LegendItem> = Vec::new();
    // NVTX ranges: shaded behind everything else, named at the top.
    for r in &t.ranges {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(secs(r.start_ns), 0.0), (secs(r.end_ns), y_end)],
            RANGE_FILL.mix(0.25).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            r.name.clone(),
            (secs(r.start_ns), y_end),
            ("sans-serif", 11),
        )))?;
    }

    let mut kinds_legend: Vec<LegendItem> = Vec::new();
    if let Some(kinds) = kinds {
        draw_kinds(&mut chart, t, kinds, scale, &mut kinds_legend)?;
    }
    match (capacity, drawn) {
        (Some(c), Some(_)) => {
            let y = c as f64 / scale;
            chart.draw_series(DashedLineSeries::new(
                vec![(x_start, y), (x_end, y)],
                8,
                5,
                ShapeStyle::from(&CAPACITY_RED).stroke_width(1),
            ))?;
            legend.push((
                CAPACITY_RED,
                format!("device capacity {}", units::bytes(c)),
                true,
            ));
        }
        (Some(c), None) => legend.push((
            CAPACITY_RED,
            format!("device capacity {} (far above)", units::bytes(c)),
            true,
        )),
        _ => {}
    }
    for s in &live {
        let buckets = t.filled(s);
        let at = |i: usize| secs(t.start_ns(i)).min(x_end);
        let (color, label) = match s.key {
            SeriesKey::Total => (BLACK, "all memory".to_string()),
            SeriesKey::Live(_, kind) => (kind_color(kind), format!("{} memory", kind.name())),
            SeriesKey::Nvml(_) => (NVML_GREY, "used by the process (NVML)".to_string()),
        };
        let label = format!("{label}, highest {}", units::bytes(s.max()));
        if let SeriesKey::Nvml(_) = s.key {
            // A sample holds until the next one (NVML says nothing in between): a dashed
            // step line, the last value until the trace ends.
            let points: Vec<(f64, f64)> = buckets
                .iter()
                .filter_map(|b| b.map(|b| (secs(b.max_time_ns), b.max as f64 / scale)))
                .collect();
            chart.draw_series(DashedLineSeries::new(
                steps(&points, x_end),
                6,
                4,
                ShapeStyle::from(&color).stroke_width(2),
            ))?;
            legend.push((color, label, true));
            continue;
        }
        // A step per bucket at its highest value, over a band down to its lowest; the
        // last value holds until the trace ends.
        let mut high = Vec::with_capacity(buckets.len() * 2 + 1);
        let mut low = Vec::with_capacity(buckets.len() * 2 + 1);
        for (i, b) in buckets.iter().enumerate() {
            let Some(b) = b else { continue };
            let (x0, x1) = (at(i), at(i + 1));
            high.push((x0, b.max as f64 / scale));
            high.push((x1, b.max as f64 / scale));
            low.push((x0, b.min as f64 / scale));
            low.push((x1, b.min as f64 / scale));
        }
        if let Some((i, last)) = buckets
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, b)| b.map(|b| (i, b)))
        {
            let v = last.last as f64 / scale;
            for x in [at(i + 1), x_end] {
                high.push((x, v));
                low.push((x, v));
            }
        }
        let band: Vec<(f64, f64)> = high.iter().copied().chain(low.into_iter().rev()).collect();
        chart.draw_series(std::iter::once(Polygon::new(band, color.mix(0.15))))?;
        chart.draw_series(LineSeries::new(high, color.stroke_width(2)))?;
        legend.push((color, label, false));
    }

    // NVTX marks: grey lines, named.
    for m in &t.marks {
        let x = secs(m.time_ns);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, y_end)],
            MARK_GREY.stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            m.name.clone(),
            (x, y_end * 0.94),
            ("sans-serif", 11).into_font().color(&MARK_GREY),
        )))?;
    }

    // Out-of-memory failures on this device (or all of them, on the all-devices panel).
    let ooms: Vec<_> = t
        .ooms
        .iter()
        .filter(|o| device.is_none() || device == Some(o.device))
        .collect();
    let labels: Vec<(f64, String)> = ooms
        .iter()
        .map(|o| (secs(o.time_ns), format!(" OOM {} ", units::bytes(o.size))))
        .collect();
    let places = place_labels(&labels, x_start, x_end);
    for (n, (x, text)) in labels.iter().enumerate() {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(*x, 0.0), (*x, y_end)],
            OOM_RED.stroke_width(2),
        )))?;
        if ooms.len() <= LABELLED_OOMS {
            let (row, left) = places[n];
            let side = if left { HPos::Right } else { HPos::Left };
            chart.draw_series(std::iter::once(Text::new(
                text.clone(),
                (*x, y_end * (1.0 - 0.05 * row as f64)),
                ("sans-serif", 11)
                    .into_font()
                    .color(&OOM_RED)
                    .pos(Pos::new(side, VPos::Top)),
            )))?;
        }
    }
    if !ooms.is_empty() {
        let count = if device.is_none() {
            t.oom_count
        } else {
            ooms.len() as u64
        };
        legend.push((
            OOM_RED,
            units::plural(count, "out-of-memory failure", "out-of-memory failures"),
            false,
        ));
    }

    let caption = match device {
        Some(d) => format!("GPU {}", units::device(d)),
        None => "all devices".to_string(),
    };
    draw_legend(&strip, &caption, &[&legend, &kinds_legend])
}

/// Colours of the kinds of memory (`kinds::Kind::ALL`'s order): light, apart from the
/// lines' colours above them.
const KIND_COLORS: [RGBColor; crate::timeline::KINDS] = [
    RGBColor(23, 190, 207),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(199, 199, 199),
];

/// PyTorch's tensors by kind of memory, stacked areas under the tensor line: each bucket
/// at the moment of its highest value, so the stack meets the line's step.
fn draw_kinds<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    t: &Timeline,
    kinds: &crate::timeline::KindSeries,
    scale: f64,
    legend: &mut Vec<LegendItem>,
) -> DrawResult<DB::ErrorType> {
    let x_end = x_end(t);
    let at = |i: usize| (t.start_ns(i) as f64 / 1e9).min(x_end);
    let mut below = vec![0u64; kinds.buckets.len()];
    for (k, kind) in crate::kinds::Kind::ALL.iter().enumerate() {
        let highest = (kinds.buckets.iter().flatten())
            .map(|b| b[k])
            .max()
            .unwrap_or(0);
        if highest == 0 {
            continue;
        }
        let mut upper = Vec::new();
        let mut lower = Vec::new();
        for (i, b) in kinds.buckets.iter().enumerate() {
            let Some(b) = b else { continue };
            let (x0, x1) = (at(i), at(i + 1));
            let (low, high) = (below[i], below[i].saturating_add(b[k]));
            below[i] = high;
            upper.extend([(x0, high as f64 / scale), (x1, high as f64 / scale)]);
            lower.extend([(x0, low as f64 / scale), (x1, low as f64 / scale)]);
        }
        let area: Vec<(f64, f64)> = upper.into_iter().chain(lower.into_iter().rev()).collect();
        let color = KIND_COLORS[k];
        chart.draw_series(std::iter::once(Polygon::new(area, color.mix(0.8).filled())))?;
        legend.push((
            color,
            format!("{}, highest {}", kind.name(), units::bytes(highest)),
            false,
        ));
    }
    Ok(())
}

/// Panel caption and legend in one row above the plot, where they never hide data.
fn draw_legend<DB: DrawingBackend>(
    strip: &DrawingArea<DB, Shift>,
    caption: &str,
    rows: &[&[LegendItem]],
) -> DrawResult<DB::ErrorType> {
    let title = ("sans-serif", 15).into_font().color(&BLACK);
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    let first = LEGEND_HEIGHT as i32 / 2;
    strip.draw(&Text::new(
        caption.to_string(),
        (84, first - 8),
        title.clone(),
    ))?;
    let indent = 84 + strip.estimate_text_size(caption, &title)?.0 as i32 + 24;
    for (row, items) in rows.iter().enumerate() {
        let y = first + row as i32 * LEGEND_HEIGHT as i32;
        let mut x = indent;
        for (color, text, dashed) in items.iter() {
            let line = color.stroke_width(2);
            if *dashed {
                strip.draw(&PathElement::new(vec![(x, y), (x + 8, y)], line))?;
                strip.draw(&PathElement::new(vec![(x + 12, y), (x + 20, y)], line))?;
            } else {
                strip.draw(&PathElement::new(vec![(x, y), (x + 20, y)], line))?;
            }
            strip.draw(&Text::new(text.clone(), (x + 26, y - 7), font.clone()))?;
            x += 26 + strip.estimate_text_size(text, &font)?.0 as i32 + 22;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn nvml_samples_hold_until_the_next_one() {
        let p = [(0.1, 4.0), (0.5, 21.0), (0.9, 8.0)];
        assert_eq!(
            super::steps(&p, 1.0),
            vec![
                (0.1, 4.0),
                (0.5, 4.0),
                (0.5, 21.0),
                (0.9, 21.0),
                (0.9, 8.0),
                (1.0, 8.0)
            ]
        );
    }

    #[test]
    fn labels_near_the_right_edge_sit_left_and_close_ones_take_other_rows() {
        let label = |x: f64| (x, " OOM 256.0 MiB ".to_string());
        // 15 characters are about 1/13 of the plot: 0.75 s of a 10 s axis.
        let p = super::place_labels(&[label(1.0), label(1.2), label(3.0), label(9.8)], 0.0, 10.0);
        assert_eq!(p, vec![(0, false), (1, false), (0, false), (0, true)]);
        // Five at once: four rows, then the one that ends first.
        let p = super::place_labels(&vec![label(1.0); 5], 0.0, 10.0);
        assert_eq!(
            p.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 0]
        );
    }

    use super::*;

    #[test]
    fn units_and_ticks() {
        assert_eq!(unit_for(0), ("B", 1.0));
        assert_eq!(unit_for(1023).0, "B");
        assert_eq!(unit_for(1 << 20).0, "MiB");
        assert_eq!(unit_for((1 << 30) - 1).0, "MiB");
        assert_eq!(tick(20.0, 0), "20");
        assert_eq!(tick(2.5, 1), "2.5");
        assert_eq!(tick(0.0, 3), "0");
        assert_eq!(tick(0.0015, 4), "0.0015");
        assert_eq!(
            (decimals(120.0), decimals(0.004), decimals(0.036)),
            (0, 4, 3)
        );
        assert_eq!(duration(16_000), "16 µs");
        assert_eq!(duration(65_536_000), "65.536 ms");
    }
}
