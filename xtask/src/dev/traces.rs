//! `cargo xtask dev --traces`: receives the controllers' traces over OTLP/HTTP on loopback and,
//! for each claim, once its `claim-to-bound` span has arrived and its trace has been quiet for
//! a moment, prints the trace as a text waterfall and writes it as SVG to `<dir>/traces/`.
//! Nothing else to install: the receiver is `otlp_capture`, in this process.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use otlp_capture::{CapturedSpan, SpanSink, waterfall};
use tokio::task::JoinHandle;

use crate::dev::DevError;

/// The span that ends when a claim is bound (see `docs/observability.md`).
pub const CLAIM_SPAN: &str = "claim-to-bound";
/// How long a claim's trace must receive no new span before it is drawn.
const QUIET: Duration = Duration::from_secs(1);
/// How often the received spans are looked at.
const POLL: Duration = Duration::from_millis(250);

/// The receiver and the task drawing claim traces; both stop when dropped.
pub struct TraceViewer {
    addr: SocketAddr,
    dir: PathBuf,
    tasks: Vec<JoinHandle<()>>,
}

impl TraceViewer {
    /// Serves OTLP/HTTP on a free 127.0.0.1 port and starts drawing claim traces into `dir`.
    pub async fn start(dir: &Path) -> Result<TraceViewer, DevError> {
        std::fs::create_dir_all(dir).map_err(|source| DevError::Io {
            action: "create directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .and_then(|l| l.local_addr().map(|addr| (l, addr)));
        let (listener, addr) = listener.map_err(|source| DevError::Io {
            action: "listen for traces on 127.0.0.1 for",
            path: dir.to_path_buf(),
            source,
        })?;
        let sink = SpanSink::default();
        let server = tokio::spawn({
            let app = otlp_capture::http_router(sink.clone());
            async move {
                if let Err(error) = axum::serve(listener, app).await {
                    eprintln!("==> the trace receiver stopped: {error}");
                }
            }
        });
        let drawer = tokio::spawn(draw_claim_traces(sink, dir.to_path_buf()));
        Ok(TraceViewer {
            addr,
            dir: dir.to_path_buf(),
            tasks: vec![server, drawer],
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the SVG files go.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The environment that points a controller's exporter here: OTLP/HTTP, and a short batch
    /// delay so a trace shows within a second of its claim binding.
    pub fn controller_env(&self) -> Vec<(String, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), self.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ]
    }
}

impl Drop for TraceViewer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Forever: draws each claim trace once it is complete enough (see [`ready_traces`]).
async fn draw_claim_traces(sink: SpanSink, dir: PathBuf) {
    let mut shown = BTreeSet::new();
    let mut last_growth: HashMap<String, (usize, Instant)> = HashMap::new();
    loop {
        tokio::time::sleep(POLL).await;
        let spans = sink.spans();
        for trace_id in ready_traces(&spans, &shown, &mut last_growth, Instant::now()) {
            let trace: Vec<CapturedSpan> = spans
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect();
            println!("{}", draw(&trace, &dir));
            shown.insert(trace_id);
        }
    }
}

/// The ids of the traces to draw now: they hold a `claim-to-bound` span, were not drawn yet,
/// and received no span for `QUIET`. `last_growth` remembers each trace's span count and when
/// it last changed.
pub fn ready_traces(
    spans: &[CapturedSpan],
    shown: &BTreeSet<String>,
    last_growth: &mut HashMap<String, (usize, Instant)>,
    now: Instant,
) -> Vec<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for span in spans {
        *counts.entry(span.trace_id.as_str()).or_default() += 1;
    }
    let mut ready: Vec<String> = spans
        .iter()
        .filter(|s| s.name == CLAIM_SPAN && !shown.contains(&s.trace_id))
        .filter_map(|s| {
            let count = counts.get(s.trace_id.as_str()).copied().unwrap_or(0);
            let entry = last_growth
                .entry(s.trace_id.clone())
                .or_insert((count, now));
            if entry.0 != count {
                *entry = (count, now);
            }
            (now.duration_since(entry.1) >= QUIET).then(|| s.trace_id.clone())
        })
        .collect();
    ready.sort();
    ready.dedup();
    ready
}

/// Writes the SVG of one claim's trace into `dir` and returns the text to print.
fn draw(trace: &[CapturedSpan], dir: &Path) -> String {
    let root = trace.iter().find(|s| s.name == CLAIM_SPAN);
    let attr = |key: &str| root.and_then(|s| s.attr(key)).unwrap_or("?").to_owned();
    let (namespace, claim) = (attr("claim.namespace"), attr("claim.name"));
    let title = format!(
        "claim {namespace}/{claim} ({}, {:.1} ms to bound)",
        attr("launch_type"),
        root.map_or(0.0, |s| s.duration_nanos() as f64 / 1e6)
    );
    let short_id: String = trace
        .first()
        .map(|s| s.trace_id.chars().take(8).collect())
        .unwrap_or_default();
    let file = dir.join(format!("{namespace}_{claim}_{short_id}.svg"));
    let saved = match std::fs::write(&file, waterfall::render_svg(&title, trace)) {
        Ok(()) => format!("written to {}", file.display()),
        Err(error) => format!("could not write {}: {error}", file.display()),
    };
    format!(
        "==> trace of {title}; {saved}\n{}",
        waterfall::render_text(trace)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: &str, name: &str) -> CapturedSpan {
        CapturedSpan {
            service: "extensions-controller".into(),
            name: name.into(),
            trace_id: trace.into(),
            span_id: format!("{trace}-{name}"),
            parent_span_id: String::new(),
            start_unix_nano: 0,
            end_unix_nano: 1_000_000,
            attributes: [
                ("claim.namespace".to_string(), "default".to_string()),
                ("claim.name".to_string(), "c1".to_string()),
            ]
            .into(),
            status_code: 0,
        }
    }

    #[test]
    fn a_claim_trace_is_drawn_once_it_has_been_quiet_and_only_once() {
        let t0 = Instant::now();
        let mut growth = HashMap::new();
        let mut shown = BTreeSet::new();
        let mut spans = vec![span("a", CLAIM_SPAN), span("b", "ReconcileSandbox")];
        assert!(ready_traces(&spans, &shown, &mut growth, t0).is_empty());
        // A new span of trace a restarts its quiet period.
        spans.push(span("a", "ReconcileSandboxClaim"));
        let later = t0 + QUIET;
        assert!(ready_traces(&spans, &shown, &mut growth, later).is_empty());
        let ready = ready_traces(&spans, &shown, &mut growth, later + QUIET);
        assert_eq!(ready, ["a"], "b has no claim span");
        shown.extend(ready);
        assert!(ready_traces(&spans, &shown, &mut growth, later + QUIET * 3).is_empty());
    }

    #[test]
    fn the_drawing_names_the_claim_and_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = draw(&[span("abcdef0123", CLAIM_SPAN)], dir.path());
        assert!(
            text.starts_with("==> trace of claim default/c1 (?, 1.0 ms to bound); written to"),
            "{text}"
        );
        assert!(dir.path().join("default_c1_abcdef01.svg").exists());
        assert!(text.contains("claim-to-bound"), "{text}");
    }
}
