//! A small reader for the Prometheus text exposition format, enough for the counters the
//! benchmark scrapes (`devcluster_requests_total`, `rest_client_requests_total`, process
//! metrics). Comments, `# TYPE`/`# HELP`, exemplars and timestamps are skipped.
//!
//! A crate (`prometheus-parse`) exists, but it pulls in `chrono`, `regex` and `itertools` for
//! what is about sixty lines here; the format subset the two servers emit is fixed.

use std::collections::BTreeMap;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, or `""` when absent (Prometheus semantics).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Parses every sample line of `text`; lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after_brace)?;
        labels = parsed;
        rest = remaining;
    }
    // Value, then an optional timestamp and/or exemplar (`# {...} v`).
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the closing brace.
fn parse_labels(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let eq = text.find('=')?;
        let key = text[..eq].trim().to_string();
        text = text[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                other => value.push(other),
            }
        };
        labels.insert(key, value);
        text = &text[end + 1..];
    }
}

/// Sum of the samples named `name` that `filter` accepts.
pub fn sum(samples: &[Sample], name: &str, filter: impl Fn(&Sample) -> bool) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && filter(s))
        .map(|s| s.value)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_escapes_and_skips_comments() {
        let text = "# HELP x y\n# TYPE devcluster_requests_total counter\n\
            devcluster_requests_total{verb=\"create\",resource=\"pods\",user_agent=\"a \\\"b\\\"\"} 3\n\
            up 1\n\
            rest_client_requests_total{code=\"200\",method=\"PATCH\"} 4.5 # {trace_id=\"x\"} 1\n\
            garbage{\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].label("verb"), "create");
        assert_eq!(samples[0].label("user_agent"), "a \"b\"");
        assert_eq!(samples[0].label("missing"), "");
        assert_eq!(samples[1].name, "up");
        assert_eq!(
            sum(&samples, "rest_client_requests_total", |s| s
                .label("method")
                == "PATCH"),
            4.5
        );
    }
}

/// The `q`-quantile of histogram `name` (its `_bucket` series summed over every label set),
/// interpolated linearly inside the bucket as Prometheus' `histogram_quantile` and the
/// reference's CI gate script do. `None` without observations.
pub fn histogram_quantile(samples: &[Sample], name: &str, q: f64) -> Option<f64> {
    let bucket_name = format!("{name}_bucket");
    let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.name == bucket_name) {
        let le: f64 = match sample.label("le") {
            "+Inf" => f64::INFINITY,
            other => other.parse().ok()?,
        };
        // Key by the bound's bits so equal bounds from different label sets add up.
        let entry = buckets.entry(le.to_bits()).or_insert((le, 0.0));
        entry.1 += sample.value;
    }
    let mut sorted: Vec<(f64, f64)> = buckets.into_values().collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = sorted.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower_bound = 0.0;
    let mut lower_count = 0.0;
    for (bound, count) in sorted {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower_bound);
            }
            let in_bucket = count - lower_count;
            let fraction = if in_bucket > 0.0 {
                (rank - lower_count) / in_bucket
            } else {
                1.0
            };
            return Some(lower_bound + (bound - lower_bound) * fraction);
        }
        lower_bound = bound;
        lower_count = count;
    }
    None
}

#[cfg(test)]
mod histogram_tests {
    use super::*;

    #[test]
    fn quantile_interpolates_inside_the_bucket_over_all_label_sets() {
        let text = r#"lat_bucket{launch_type="warm",le="100"} 8
lat_bucket{launch_type="warm",le="250"} 10
lat_bucket{launch_type="warm",le="+Inf"} 10
lat_bucket{launch_type="cold",le="100"} 0
lat_bucket{launch_type="cold",le="250"} 0
lat_bucket{launch_type="cold",le="+Inf"} 10
"#;
        let samples = parse(text);
        // 20 observations: 8 ≤ 100, 2 in (100, 250], 10 above 250.
        assert_eq!(histogram_quantile(&samples, "lat", 0.2), Some(50.0));
        assert_eq!(histogram_quantile(&samples, "lat", 0.45), Some(175.0));
        assert_eq!(histogram_quantile(&samples, "lat", 0.99), Some(250.0));
        assert_eq!(histogram_quantile(&samples, "missing", 0.5), None);
    }
}
