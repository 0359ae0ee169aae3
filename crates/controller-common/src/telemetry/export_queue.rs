//! The span processor between the tracer and the OTLP exporter: a bounded queue drained by a
//! task on the tokio runtime.
//!
//! Why not the SDK's `BatchSpanProcessor`: it runs exports on its own thread with a
//! `block_on` that has no tokio reactor (the async HTTP client needs one), and it counts the
//! spans it drops only in a private field. Here:
//! - `on_end` never blocks: it `try_send`s into a bounded channel (`OTEL_BSP_MAX_QUEUE_SIZE`,
//!   default 2048); a full queue drops the span and counts it
//!   (`agent_sandbox_trace_spans_dropped_total{reason="queue_full"}`).
//! - one task collects spans into batches (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default 512) and
//!   exports a batch when it is full or `OTEL_BSP_SCHEDULE_DELAY` (default 5000 ms) has passed;
//!   each export is bounded by `OTEL_BSP_EXPORT_TIMEOUT` (default 30000 ms). A failed or
//!   timed-out export drops its batch (`reason="export_failed"`); exported spans count in
//!   `agent_sandbox_trace_spans_exported_total`.

use std::sync::Mutex;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};

/// Queue and batch sizes and delays, from the `OTEL_BSP_*` variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Spans waiting for export at most; more are dropped.
    pub max_queue_size: usize,
    /// Spans per export request at most.
    pub max_export_batch_size: usize,
    /// Longest a span waits before its batch is exported.
    pub schedule_delay: Duration,
    /// Longest one export may take.
    pub export_timeout: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_queue_size: 2048,
            max_export_batch_size: 512,
            schedule_delay: Duration::from_millis(5000),
            export_timeout: Duration::from_millis(30_000),
        }
    }
}

impl QueueConfig {
    /// Reads the `OTEL_BSP_*` variables through `env`; an unparsable value is an error naming
    /// the variable.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<QueueConfig, String> {
        let mut config = QueueConfig::default();
        let number = |name: &str| -> Result<Option<u64>, String> {
            match env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
            {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a whole non-negative number")),
            }
        };
        if let Some(n) = number("OTEL_BSP_MAX_QUEUE_SIZE")? {
            config.max_queue_size = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        if let Some(n) = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")? {
            config.max_export_batch_size = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        config.max_export_batch_size = config.max_export_batch_size.min(config.max_queue_size);
        if let Some(ms) = number("OTEL_BSP_SCHEDULE_DELAY")? {
            config.schedule_delay = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = number("OTEL_BSP_EXPORT_TIMEOUT")? {
            config.export_timeout = Duration::from_millis(ms.max(1));
        }
        Ok(config)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    reason: &'static str,
}

/// `agent_sandbox_trace_spans_dropped_total{reason}` and
/// `agent_sandbox_trace_spans_exported_total`. Cheap to clone; clones share values.
#[derive(Clone, Debug, Default)]
pub struct ExportMetrics {
    dropped: Family<DropLabels, Counter>,
    exported: Counter,
}

impl ExportMetrics {
    /// Registers both families on `registry` (the root one: the names carry no prefix).
    pub fn register(&self, registry: &mut Registry) {
        // Both label values exist from the start, so a dashboard sees 0 rather than nothing.
        for reason in [REASON_QUEUE_FULL, REASON_EXPORT_FAILED] {
            let _ = self.dropped.get_or_create(&DropLabels { reason });
        }
        registry.register(
            "agent_sandbox_trace_spans_dropped",
            "Finished spans not delivered to the OTLP collector: queue_full (the bounded export queue was full) or export_failed (the export request failed or timed out).",
            self.dropped.clone(),
        );
        registry.register(
            "agent_sandbox_trace_spans_exported",
            "Finished spans delivered to the OTLP collector.",
            self.exported.clone(),
        );
    }

    /// Spans dropped for `reason` so far.
    pub fn dropped(&self, reason: &'static str) -> u64 {
        self.dropped.get_or_create(&DropLabels { reason }).get()
    }

    /// Spans exported so far.
    pub fn exported(&self) -> u64 {
        self.exported.get()
    }
}

/// `reason` label: the export queue was full when the span ended.
pub const REASON_QUEUE_FULL: &str = "queue_full";
/// `reason` label: the export request failed or timed out.
pub const REASON_EXPORT_FAILED: &str = "export_failed";

enum Message {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
    Shutdown(oneshot::Sender<()>),
}

/// The processor; see the module documentation.
#[derive(Debug)]
pub struct QueueingSpanProcessor {
    spans: mpsc::Sender<Message>,
    /// Flush and shutdown requests: unbounded so they are never lost to a full span queue.
    control: mpsc::UnboundedSender<Message>,
    metrics: ExportMetrics,
    worker: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Span(_) => "Span",
            Message::Flush(_) => "Flush",
            Message::Shutdown(_) => "Shutdown",
        })
    }
}

impl QueueingSpanProcessor {
    /// Starts the export task on the current tokio runtime (call inside it).
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        config: QueueConfig,
        metrics: ExportMetrics,
    ) -> QueueingSpanProcessor {
        let (spans, span_rx) = mpsc::channel(config.max_queue_size);
        let (control, control_rx) = mpsc::unbounded_channel();
        let worker = tokio::spawn(run_exports(
            exporter,
            config,
            metrics.clone(),
            span_rx,
            control_rx,
        ));
        QueueingSpanProcessor {
            spans,
            control,
            metrics,
            worker: Mutex::new(Some(worker)),
        }
    }

    fn request(
        &self,
        make: impl FnOnce(oneshot::Sender<()>) -> Message,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(make(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        // Called from synchronous code (often `spawn_blocking`); the export task runs on the
        // runtime's workers meanwhile.
        let deadline = std::time::Instant::now() + timeout;
        let mut rx = rx;
        loop {
            match rx.try_recv() {
                Ok(()) => return Ok(()),
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(OTelSdkError::AlreadyShutdown);
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if std::time::Instant::now() >= deadline {
                return Err(OTelSdkError::Timeout(timeout));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl SpanProcessor for QueueingSpanProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {}
            Err(_) => {
                self.metrics
                    .dropped
                    .get_or_create(&DropLabels {
                        reason: REASON_QUEUE_FULL,
                    })
                    .inc();
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.request(Message::Flush, Duration::from_secs(5))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.request(Message::Shutdown, timeout);
        if result.is_err()
            && let Some(worker) = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            worker.abort();
        }
        result
    }
}

async fn run_exports<E: SpanExporter>(
    exporter: E,
    config: QueueConfig,
    metrics: ExportMetrics,
    mut spans: mpsc::Receiver<Message>,
    mut control: mpsc::UnboundedReceiver<Message>,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(config.max_export_batch_size);
    let mut due = tokio::time::Instant::now() + config.schedule_delay;
    loop {
        let message = tokio::select! {
            biased;
            m = control.recv() => m,
            m = spans.recv() => m,
            () = tokio::time::sleep_until(due) => {
                export(&exporter, &config, &metrics, &mut batch).await;
                due = tokio::time::Instant::now() + config.schedule_delay;
                continue;
            }
        };
        match message {
            Some(Message::Span(span)) => {
                batch.push(*span);
                if batch.len() >= config.max_export_batch_size {
                    export(&exporter, &config, &metrics, &mut batch).await;
                    due = tokio::time::Instant::now() + config.schedule_delay;
                }
            }
            Some(Message::Flush(done)) => {
                drain(&mut spans, &mut batch, &exporter, &config, &metrics).await;
                let _ = done.send(());
            }
            Some(Message::Shutdown(done)) => {
                drain(&mut spans, &mut batch, &exporter, &config, &metrics).await;
                let _ = exporter.shutdown_with_timeout(config.export_timeout);
                let _ = done.send(());
                return;
            }
            None => {
                export(&exporter, &config, &metrics, &mut batch).await;
                return;
            }
        }
    }
}

/// Exports everything queued so far.
async fn drain<E: SpanExporter>(
    spans: &mut mpsc::Receiver<Message>,
    batch: &mut Vec<SpanData>,
    exporter: &E,
    config: &QueueConfig,
    metrics: &ExportMetrics,
) {
    while let Ok(message) = spans.try_recv() {
        if let Message::Span(span) = message {
            batch.push(*span);
            if batch.len() >= config.max_export_batch_size {
                export(exporter, config, metrics, batch).await;
            }
        }
    }
    export(exporter, config, metrics, batch).await;
}

async fn export<E: SpanExporter>(
    exporter: &E,
    config: &QueueConfig,
    metrics: &ExportMetrics,
    batch: &mut Vec<SpanData>,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let count = spans.len() as u64;
    match tokio::time::timeout(config.export_timeout, exporter.export(spans)).await {
        Ok(Ok(())) => {
            metrics.exported.inc_by(count);
        }
        Ok(Err(e)) => {
            metrics
                .dropped
                .get_or_create(&DropLabels {
                    reason: REASON_EXPORT_FAILED,
                })
                .inc_by(count);
            tracing::debug!(target: "agent_sandbox::telemetry", error = %e, spans = count, "span export failed");
        }
        Err(_) => {
            metrics
                .dropped
                .get_or_create(&DropLabels {
                    reason: REASON_EXPORT_FAILED,
                })
                .inc_by(count);
            tracing::debug!(target: "agent_sandbox::telemetry", spans = count, "span export timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::env_of;
    use opentelemetry::trace::{Tracer, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    #[test]
    fn bsp_variables_are_read_and_bad_values_named() {
        let c = QueueConfig::from_env(env_of(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "10"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50"),
        ]))
        .unwrap();
        assert_eq!(c.schedule_delay, Duration::from_millis(100));
        assert_eq!(c.max_queue_size, 10);
        assert_eq!(
            c.max_export_batch_size, 10,
            "a batch never exceeds the queue"
        );
        assert_eq!(c.export_timeout, Duration::from_secs(30));
        let err = QueueConfig::from_env(env_of(&[("OTEL_BSP_SCHEDULE_DELAY", "5s")])).unwrap_err();
        assert!(
            err.contains("OTEL_BSP_SCHEDULE_DELAY") && err.contains("5s"),
            "{err}"
        );
    }

    /// An exporter that never answers: every export hangs until its timeout.
    #[derive(Debug)]
    struct Stuck;

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            std::future::pending::<()>().await;
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_are_batched_exported_and_flushed() {
        let exporter = InMemorySpanExporter::default();
        let metrics = ExportMetrics::default();
        let processor = QueueingSpanProcessor::start(
            exporter.clone(),
            QueueConfig {
                schedule_delay: Duration::from_secs(3600),
                ..QueueConfig::default()
            },
            metrics.clone(),
        );
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        for _ in 0..3 {
            tracer.in_span("step", |_| {});
        }
        assert!(
            exporter.get_finished_spans().unwrap().is_empty(),
            "batched, not yet due"
        );
        tokio::task::spawn_blocking(move || {
            provider.force_flush().unwrap();
            provider
        })
        .await
        .unwrap();
        assert_eq!(exporter.get_finished_spans().unwrap().len(), 3);
        assert_eq!(metrics.exported(), 3);
        assert_eq!(metrics.dropped(REASON_QUEUE_FULL), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_collector_never_blocks_span_ends_and_drops_are_counted() {
        let metrics = ExportMetrics::default();
        let processor = QueueingSpanProcessor::start(
            Stuck,
            QueueConfig {
                max_queue_size: 8,
                max_export_batch_size: 4,
                schedule_delay: Duration::from_millis(1),
                export_timeout: Duration::from_millis(200),
            },
            metrics.clone(),
        );
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let started = std::time::Instant::now();
        for _ in 0..1000 {
            tracer.in_span("step", |_| {});
        }
        // 1000 span ends with a hung exporter take about as long as without one: the queue
        // absorbs 8 + one batch, the rest are dropped and counted.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "span ends blocked for {:?}",
            started.elapsed()
        );
        assert!(
            metrics.dropped(REASON_QUEUE_FULL) >= 1000 - 8 - 4,
            "{}",
            metrics.dropped(REASON_QUEUE_FULL)
        );
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("agent_sandbox_trace_spans_dropped_total{reason=\"queue_full\"}"),
            "{text}"
        );
        // The hung batch times out and is counted as failed.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while metrics.dropped(REASON_EXPORT_FAILED) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the stuck export never timed out"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let shutdown = tokio::task::spawn_blocking(move || {
            provider.shutdown_with_timeout(Duration::from_secs(3))
        })
        .await
        .unwrap();
        assert!(
            shutdown.is_ok() || matches!(shutdown, Err(OTelSdkError::Timeout(_))),
            "{shutdown:?}"
        );
    }
}
