//! One captured trace as a waterfall: rows in tree order, bars on a shared time axis. As SVG
//! (colour by service; the pictures of `docs/observability/` and `cargo xtask dev --traces`) or
//! as text for a terminal.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use crate::CapturedSpan;

const ROW: f64 = 22.0;
const LABEL_WIDTH: f64 = 330.0;
const CHART_WIDTH: f64 = 640.0;
const TOP: f64 = 48.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn colour(service: &str) -> &'static str {
    match service {
        "extensions-controller" => "#4e79a7",
        "sandbox-controller" => "#f28e2b",
        _ => "#59a14f",
    }
}

/// Spans in depth-first order with their depth; spans whose parent is not in `spans` are
/// roots. Children are ordered by start time.
pub fn tree_order(spans: &[CapturedSpan]) -> Vec<(usize, &CapturedSpan)> {
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<&CapturedSpan>> = BTreeMap::new();
    let mut roots = Vec::new();
    for span in spans {
        if ids.contains(span.parent_span_id.as_str()) {
            children
                .entry(span.parent_span_id.as_str())
                .or_default()
                .push(span);
        } else {
            roots.push(span);
        }
    }
    let by_start =
        |v: &mut Vec<&CapturedSpan>| v.sort_by_key(|s| (s.start_unix_nano, s.name.clone()));
    by_start(&mut roots);
    for list in children.values_mut() {
        by_start(list);
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, &CapturedSpan)> = roots.into_iter().rev().map(|s| (0, s)).collect();
    while let Some((depth, span)) = stack.pop() {
        out.push((depth, span));
        if let Some(kids) = children.get(span.span_id.as_str()) {
            stack.extend(kids.iter().rev().map(|k| (depth + 1, *k)));
        }
    }
    out
}

/// The SVG document for `spans` (one trace), titled `title`.
pub fn render_svg(title: &str, spans: &[CapturedSpan]) -> String {
    let rows = tree_order(spans);
    let start = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
    let end = spans
        .iter()
        .map(|s| s.end_unix_nano)
        .max()
        .unwrap_or(start)
        .max(start + 1);
    let total = (end - start) as f64;
    let x = |t: u64| LABEL_WIDTH + (t.saturating_sub(start) as f64 / total) * CHART_WIDTH;
    let height = TOP + ROW * rows.len() as f64 + 40.0;
    let width = LABEL_WIDTH + CHART_WIDTH + 90.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="8" y="18" font-size="13" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="8" y="34" fill="#555">trace {} · {:.1} ms · blue: extensions-controller, orange: sandbox-controller</text>"##,
        spans.first().map(|s| s.trace_id.as_str()).unwrap_or(""),
        total / 1e6
    );
    for tick in 0..=4 {
        let tx = LABEL_WIDTH + CHART_WIDTH * f64::from(tick) / 4.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{tx:.1}" y1="{TOP}" x2="{tx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{tx:.1}" y="{:.1}" fill="#555" text-anchor="middle">{:.0} ms</text>"##,
            height - 30.0,
            height - 16.0,
            total / 1e6 * f64::from(tick) / 4.0
        );
    }
    for (i, (depth, span)) in rows.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let x0 = x(span.start_unix_nano);
        let w = (x(span.end_unix_nano) - x0).max(1.5);
        let label = format!("{}{}", "  ".repeat(*depth), span.name);
        let extra = span
            .attr("launch_type")
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default();
        let _ = writeln!(
            svg,
            r#"<text x="8" y="{:.1}" xml:space="preserve">{}{}</text>"#,
            y + 15.0,
            escape(&label),
            escape(&extra)
        );
        let stroke = if span.status_code == 2 {
            r#" stroke="red""#
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{w:.1}" height="14" rx="2" fill="{}"{stroke}><title>{} ({}) {:.2} ms</title></rect>"#,
            y + 4.0,
            colour(&span.service),
            escape(&span.name),
            escape(&span.service),
            span.duration_nanos() as f64 / 1e6
        );
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" fill="#333">{:.1} ms</text>"##,
            x0 + w + 4.0,
            y + 15.0,
            span.duration_nanos() as f64 / 1e6
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Columns of the bar area in [`render_text`].
const TEXT_BARS: usize = 40;

/// The trace as text: one line per span in tree order (indented name, service, a bar on the
/// trace's time axis, its duration), under a line with the trace id and total time.
pub fn render_text(spans: &[CapturedSpan]) -> String {
    let rows = tree_order(spans);
    let start = spans.iter().map(|s| s.start_unix_nano).min().unwrap_or(0);
    let end = spans
        .iter()
        .map(|s| s.end_unix_nano)
        .max()
        .unwrap_or(start)
        .max(start + 1);
    let total = (end - start) as f64;
    let labels: Vec<String> = rows
        .iter()
        .map(|(depth, span)| {
            let launch = span
                .attr("launch_type")
                .map(|l| format!(" [{l}]"))
                .unwrap_or_default();
            format!("{}{}{launch}", "  ".repeat(*depth), span.name)
        })
        .collect();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let service_width = rows
        .iter()
        .map(|(_, s)| s.service.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "trace {} · {:.1} ms\n",
        spans.first().map(|s| s.trace_id.as_str()).unwrap_or(""),
        total / 1e6
    );
    for ((_, span), label) in rows.iter().zip(&labels) {
        let column = |t: u64| {
            let at = (t.saturating_sub(start) as f64 / total * TEXT_BARS as f64).round();
            (at as usize).min(TEXT_BARS)
        };
        let from = column(span.start_unix_nano).min(TEXT_BARS - 1);
        let to = column(span.end_unix_nano).max(from + 1);
        let bar: String = (0..TEXT_BARS)
            .map(|i| if (from..to).contains(&i) { '█' } else { ' ' })
            .collect();
        let _ = writeln!(
            out,
            "{label:<label_width$}  {:<service_width$}  |{bar}| {:>8.1} ms",
            span.service,
            span.duration_nanos() as f64 / 1e6
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str, id: &str, parent: &str, start: u64, end: u64) -> CapturedSpan {
        CapturedSpan {
            service: "extensions-controller".into(),
            name: name.into(),
            trace_id: "t".into(),
            span_id: id.into(),
            parent_span_id: parent.into(),
            start_unix_nano: start,
            end_unix_nano: end,
            attributes: BTreeMap::new(),
            status_code: 0,
        }
    }

    #[test]
    fn rows_follow_the_tree_and_time() {
        let spans = vec![
            span("late-child", "c2", "r", 50, 60),
            span("root", "r", "client", 0, 100),
            span("early-child", "c1", "r", 10, 20),
            span("grandchild", "g", "c1", 12, 15),
        ];
        let order: Vec<(usize, &str)> = tree_order(&spans)
            .into_iter()
            .map(|(d, s)| (d, s.name.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                (0, "root"),
                (1, "early-child"),
                (2, "grandchild"),
                (1, "late-child")
            ]
        );
        let svg = render_svg("t <1>", &spans);
        assert!(svg.starts_with("<svg") && svg.contains("t &lt;1&gt;"));
        assert_eq!(svg.matches("<rect x=").count(), 4);
    }

    #[test]
    fn text_rows_are_indented_and_bars_sit_on_the_time_axis() {
        let spans = vec![
            span("root", "r", "", 0, 100),
            span("first-half", "a", "r", 0, 50),
            span("second-half", "b", "r", 50, 100),
        ];
        let text = render_text(&spans);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("trace t · 0.0 ms"), "{text}");
        assert!(lines[1].starts_with("root "), "{text}");
        assert!(lines[2].starts_with("  first-half "), "{text}");
        let bar = |line: &str| line.split('|').nth(1).unwrap().to_owned();
        assert_eq!(bar(lines[1]), "█".repeat(40));
        assert_eq!(
            bar(lines[2]),
            format!("{}{}", "█".repeat(20), " ".repeat(20))
        );
        assert_eq!(
            bar(lines[3]),
            format!("{}{}", " ".repeat(20), "█".repeat(20))
        );
    }
}
