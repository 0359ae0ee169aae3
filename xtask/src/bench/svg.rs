//! Hand-written SVG charts (line charts and bar charts). A plotting crate would bring font
//! handling and a dozen dependencies for four simple charts; these are plain polylines, axes
//! with "nice" ticks and a legend.

use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 52.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `span`.
pub fn nice_step(span: f64, target: usize) -> f64 {
    if span.is_nan() || span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn format_tick(value: f64) -> String {
    if value.abs() >= 1000.0 || value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else if (value * 10.0).fract().abs() < 1e-9 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

struct Frame {
    x_min: f64,
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        let span = (self.x_max - self.x_min).max(f64::EPSILON);
        LEFT + (v - self.x_min) / span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, v: f64) -> f64 {
        TOP + (1.0 - v / self.y_max.max(f64::EPSILON)) * (HEIGHT - TOP - BOTTOM)
    }
}

fn open(svg: &mut String, title: &str) {
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
}

fn axes(svg: &mut String, frame: &Frame, x_label: &str, y_label: &str, x_ticks: bool) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let _ = write!(
        svg,
        r##"<path d="M{x0} {y0} V{y1} H{x1}" stroke="#333" fill="none"/>"##
    );
    let y_step = nice_step(frame.y_max, 5);
    let mut v = 0.0;
    while v <= frame.y_max + y_step * 1e-6 {
        let y = frame.y(v);
        let _ = write!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            format_tick(v)
        );
        v += y_step;
    }
    if x_ticks {
        let x_step = nice_step(frame.x_max - frame.x_min, 8);
        let mut v = (frame.x_min / x_step).ceil() * x_step;
        while v <= frame.x_max + x_step * 1e-6 {
            let x = frame.x(v);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{}" stroke="#333"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                y1 + 5.0,
                y1 + 18.0,
                format_tick(v)
            );
            v += x_step;
        }
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 12.0,
        escape(x_label),
        (y0 + y1) / 2.0,
        escape(y_label)
    );
}

/// Closes an opened chart with a centred "no data".
fn no_data(mut svg: String) -> String {
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
        WIDTH / 2.0,
        HEIGHT / 2.0
    );
    svg
}

/// A line chart of `series` (empty series are skipped; an empty chart says "no data").
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let mut svg = String::new();
    open(&mut svg, title);
    if all.is_empty() {
        return no_data(svg);
    }
    let x_min = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let mut x_max = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    if x_max <= x_min {
        x_max = x_min + 1.0;
    }
    let y_top = all.iter().map(|p| p.1).fold(0.0, f64::max);
    let y_max = if y_top > 0.0 { y_top * 1.05 } else { 1.0 };
    let frame = Frame {
        x_min,
        x_max,
        y_max,
    };
    axes(&mut svg, &frame, x_label, y_label, true);
    for (index, s) in series.iter().filter(|s| !s.points.is_empty()).enumerate() {
        let color = COLORS[index % COLORS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", frame.x(x), frame.y(y)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.6"/>"#,
            points.join(" ")
        );
        let ly = TOP + 10.0 + index as f64 * 18.0;
        let lx = WIDTH - RIGHT + 12.0;
        let _ = write!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A vertical bar chart, one bar per `(label, value)`.
pub fn bar_chart(title: &str, y_label: &str, bars: &[(String, f64)]) -> String {
    let mut svg = String::new();
    open(&mut svg, title);
    if bars.is_empty() {
        return no_data(svg);
    }
    let y_top = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let frame = Frame {
        x_min: 0.0,
        x_max: bars.len() as f64,
        y_max: if y_top > 0.0 { y_top * 1.1 } else { 1.0 },
    };
    axes(&mut svg, &frame, "", y_label, false);
    let slot = (WIDTH - LEFT - RIGHT) / bars.len() as f64;
    for (index, (label, value)) in bars.iter().enumerate() {
        let x = frame.x(index as f64) + slot * 0.15;
        let y = frame.y(*value);
        let color = COLORS[index % COLORS.len()];
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            slot * 0.7,
            (HEIGHT - BOTTOM - y).max(0.0),
            x + slot * 0.35,
            y - 4.0,
            format_tick(super::stats::round(*value, 2)),
            x + slot * 0.35,
            HEIGHT - BOTTOM + 16.0,
            escape(label)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.3, 5), 0.1);
        assert_eq!(nice_step(0.0, 5), 1.0);
    }

    #[test]
    fn charts_are_svg_with_escaped_text_and_every_series() {
        let svg = line_chart(
            "p99 <ms>",
            "s",
            "ms",
            &[
                Series {
                    name: "p50".into(),
                    points: vec![(0.0, 1.0), (1.0, 2.0)],
                },
                Series {
                    name: "p99".into(),
                    points: vec![(0.0, 3.0), (1.0, 9.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("p99 &lt;ms&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(line_chart("t", "x", "y", &[]).contains("no data"));
        let bars = bar_chart(
            "verbs",
            "requests",
            &[("get".into(), 3.0), ("patch".into(), 1.5)],
        );
        assert_eq!(bars.matches("<rect x=").count(), 2);
    }
}
