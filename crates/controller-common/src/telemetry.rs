//! Logging and tracing setup.
//!
//! - Logs: `tracing-subscriber`, text or JSON lines on stderr, filtered by `--log-level`
//!   (EnvFilter syntax).
//! - Traces: exported over OTLP only when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_TRACES_EXPORTER` is not `none`);
//!   otherwise no exporter is built and no connection is ever attempted. The standard
//!   variables configure the rest: `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` (`grpc`, the
//!   default, or `http/protobuf`), `..._HEADERS`, `..._TIMEOUT`, `..._CERTIFICATE` (a PEM CA
//!   bundle added to the system roots for `https://` endpoints), `OTEL_TRACES_SAMPLER`/`_ARG`,
//!   `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`. `OTEL_SERVICE_NAME` wins over the binary's
//!   default service name.
//! - Export runs through [`export_queue::QueueingSpanProcessor`]: a bounded queue drained on
//!   the tokio runtime, so an unreachable collector drops spans (counted in
//!   `agent_sandbox_trace_spans_dropped_total`) and never blocks a reconcile.
//! - TLS (both transports) is rustls with the *ring* provider and the system's roots.
//! - Propagation: the W3C TraceContext propagator is installed globally, and
//!   [`current_context_json`] / [`context_from_json`] convert a context to and from the JSON
//!   header map the reference stores in its trace-context annotation.
//! - Spans that cover several reconciles are emitted at their end with explicit timestamps
//!   ([`emit_timed_span`]) and ids derived from the object ([`span_ids`]), so every pass can
//!   name them as parent beforehand.

pub mod export_queue;
mod otlp_exporter;
pub mod span_ids;

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::args::{CommonArgs, LogFormat};
use crate::error::Error;

/// How long [`TelemetryGuard::shutdown`] waits for the last spans to be exported.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Targets never exported as spans: the exporter's own transport would trace itself.
const EXPORTER_INTERNAL_TARGETS: &str =
    "h2=off,tonic=off,hyper=off,hyper_util=off,tower=off,reqwest=off,rustls=off";

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (tonic), default port 4317.
    Grpc,
    /// OTLP over HTTP with protobuf bodies, default port 4318.
    HttpProtobuf,
    /// OTLP over HTTP with JSON bodies (not built into these binaries: a startup error).
    HttpJson,
}

/// The trace-export decision derived from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// Transport.
    pub protocol: OtlpProtocol,
    /// `service.name` resource attribute.
    pub service_name: String,
    /// Queue, batch and delay settings (`OTEL_BSP_*`).
    pub queue: export_queue::QueueConfig,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`: extra CA bundle (PEM file) for TLS.
    pub ca_file: Option<String>,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` (ms), default 10 s.
    pub timeout: Duration,
}

/// Samplers `OTEL_TRACES_SAMPLER` may name (the SDK builds them; others are an error here
/// rather than a silent fallback).
const SAMPLERS: [&str; 6] = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
];

/// Decides from the environment (through `env`, so tests need not touch the process
/// environment) whether and how to export traces. `Ok(None)`: no exporter.
pub fn otlp_settings(
    env: impl Fn(&str) -> Option<String>,
    default_service_name: &str,
) -> Result<Option<OtlpSettings>, Error> {
    let set = |name: &str| {
        env(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    // The signal-specific variable wins over the general one.
    let either = |traces: &str, general: &str| -> Option<(String, String)> {
        set(traces)
            .map(|v| (traces.to_owned(), v))
            .or_else(|| set(general).map(|v| (general.to_owned(), v)))
    };
    if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return Ok(None);
    }
    if set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    let protocol = match either(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        None => OtlpProtocol::Grpc,
        Some((_, v)) if v == "grpc" => OtlpProtocol::Grpc,
        Some((_, v)) if v == "http/protobuf" => OtlpProtocol::HttpProtobuf,
        Some((_, v)) if v == "http/json" => OtlpProtocol::HttpJson,
        Some((var, other)) => {
            return Err(Error::Telemetry(format!(
                "{var}={other:?} is not an OTLP protocol; use grpc or http/protobuf"
            )));
        }
    };
    if let Some(sampler) = set("OTEL_TRACES_SAMPLER") {
        if !SAMPLERS.contains(&sampler.as_str()) {
            return Err(Error::Telemetry(format!(
                "OTEL_TRACES_SAMPLER={sampler:?} is not supported; use one of {}",
                SAMPLERS.join(", ")
            )));
        }
        if sampler.ends_with("traceidratio")
            && let Some(arg) = set("OTEL_TRACES_SAMPLER_ARG")
            && !arg.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r))
        {
            return Err(Error::Telemetry(format!(
                "OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio between 0 and 1"
            )));
        }
    }
    let queue = export_queue::QueueConfig::from_env(&env).map_err(Error::Telemetry)?;
    let timeout = match either(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        None => Duration::from_secs(10),
        Some((var, v)) => Duration::from_millis(v.parse::<u64>().map_err(|_| {
            Error::Telemetry(format!("{var}={v:?} is not a whole number of milliseconds"))
        })?),
    };
    let service_name = set("OTEL_SERVICE_NAME").unwrap_or_else(|| default_service_name.to_owned());
    Ok(Some(OtlpSettings {
        protocol,
        service_name,
        queue,
        ca_file: either(
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        )
        .map(|(_, v)| v),
        timeout,
    }))
}

/// Keeps the tracer provider alive; shut it down at exit to flush the last spans.
#[must_use = "dropping the guard shuts tracing export down"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    export_metrics: export_queue::ExportMetrics,
}

impl TelemetryGuard {
    /// Whether spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Registers `agent_sandbox_trace_spans_dropped_total` and
    /// `agent_sandbox_trace_spans_exported_total` (zero when nothing is exported).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.export_metrics.register(registry);
    }

    /// Flushes pending spans and stops the exporter, waiting at most [`FLUSH_TIMEOUT`]. Runs
    /// the blocking SDK shutdown off the async worker threads.
    pub async fn shutdown(mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        let flush =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT));
        match tokio::time::timeout(FLUSH_TIMEOUT + Duration::from_secs(1), flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => eprintln!("trace exporter shutdown: {e}"),
            Ok(Err(e)) => eprintln!("trace exporter shutdown task: {e}"),
            Err(_) => eprintln!("trace exporter shutdown timed out; some spans may be lost"),
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Not awaited (see `shutdown`): a short bound, since this may run on a runtime
            // worker the export task needs.
            let _ = provider.shutdown_with_timeout(Duration::from_millis(500));
        }
    }
}

/// Installs the global subscriber and propagator. Call once, early in `main`, inside the tokio
/// runtime (the export task runs on it). `default_service_name` is used unless
/// `OTEL_SERVICE_NAME` is set (e.g. `sandbox-controller`, `extensions-controller`).
pub fn init(args: &CommonArgs, default_service_name: &str) -> Result<TelemetryGuard, Error> {
    let filter = args.effective_log_filter();
    let settings = otlp_settings(|k| std::env::var(k).ok(), default_service_name)?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let export_metrics = export_queue::ExportMetrics::default();
    let provider = match &settings {
        Some(s) => Some(build_provider(s, &export_metrics)?),
        None => None,
    };
    let otel_layer = match &provider {
        Some(provider) => {
            let otel_filter = EnvFilter::builder()
                .parse(format!("{filter},{EXPORTER_INTERNAL_TARGETS}"))
                .map_err(|e| Error::Telemetry(format!("log filter {filter:?}: {e}")))?;
            let tracer = provider.tracer(default_service_name.to_owned());
            opentelemetry::global::set_tracer_provider(provider.clone());
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(otel_filter),
            )
        }
        None => None,
    };
    let log_filter = EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| Error::Telemetry(format!("log filter {filter:?}: {e}")))?;
    let fmt_layer = match args.effective_log_format() {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .map_err(|e| Error::Telemetry(format!("a global subscriber is already installed: {e}")))?;
    if let Some(s) = &settings {
        tracing::info!(service = %s.service_name, protocol = ?s.protocol, "exporting traces over OTLP");
    }
    Ok(TelemetryGuard {
        provider,
        export_metrics,
    })
}

fn build_provider(
    settings: &OtlpSettings,
    export_metrics: &export_queue::ExportMetrics,
) -> Result<SdkTracerProvider, Error> {
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .build();
    let mut exporter = otlp_exporter::build(settings)?;
    opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
    let processor = export_queue::QueueingSpanProcessor::start(
        exporter,
        settings.queue,
        export_metrics.clone(),
    );
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_id_generator(span_ids::OverridableIds::default())
        .with_resource(resource)
        .build())
}

/// A span whose start and end are known only afterwards (it covers several reconciles).
#[derive(Debug, Clone)]
pub struct TimedSpan {
    /// Span name.
    pub name: &'static str,
    /// Start.
    pub start: std::time::SystemTime,
    /// End (clamped to be no earlier than `start`).
    pub end: std::time::SystemTime,
    /// Attributes.
    pub attributes: Vec<opentelemetry::KeyValue>,
    /// `Some(reason)` marks the span failed with that description.
    pub error: Option<String>,
    /// Ids to give the span (see [`span_ids`]): the trace id is used only for a root span.
    pub ids: Option<(
        Option<opentelemetry::trace::TraceId>,
        opentelemetry::trace::SpanId,
    )>,
}

/// Emits `span` under `parent` through the global tracer provider (a no-op when traces are
/// not exported). Returns the emitted span's context (invalid when nothing is recorded).
pub fn emit_timed_span(
    span: TimedSpan,
    parent: &opentelemetry::Context,
) -> opentelemetry::trace::SpanContext {
    use opentelemetry::trace::{Span as _, Status, Tracer as _};
    let tracer = opentelemetry::global::tracer("agent-sandbox");
    let end = span.end.max(span.start);
    let builder = tracer
        .span_builder(span.name)
        .with_start_time(span.start)
        .with_attributes(span.attributes);
    let start = || builder.start_with_context(&tracer, parent);
    let mut started = match span.ids {
        Some((trace_id, span_id)) => span_ids::with_ids(trace_id, span_id, start),
        None => start(),
    };
    if let Some(reason) = span.error {
        started.set_status(Status::error(reason));
    }
    let context = started.span_context().clone();
    started.end_with_timestamp(end);
    context
}

/// The current span's context as the JSON map of W3C headers
/// (`{"traceparent":"00-...-...-01"}`), or `None` when there is no valid span context (no
/// exporter, or outside any span): write nothing then.
pub fn current_context_json() -> Option<String> {
    let cx = tracing::Span::current().context();
    context_to_json(&cx)
}

/// `cx` as the JSON header map, or `None` without a valid span context.
pub fn context_to_json(cx: &opentelemetry::Context) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    // As the reference: `tracestate` only when there is one.
    carrier.retain(|_, v| !v.is_empty());
    serde_json::to_string(&carrier).ok()
}

/// Parses the JSON header map written by [`current_context_json`] (or the reference) into a
/// parent context. A malformed value is an error the caller should log before starting a new
/// root span.
pub fn context_from_json(json: &str) -> Result<opentelemetry::Context, serde_json::Error> {
    let carrier: HashMap<String, String> = serde_json::from_str(json)?;
    Ok(TraceContextPropagator::new().extract(&carrier))
}

/// An environment lookup over fixed pairs, for the tests of the `OTEL_*` readers.
#[cfg(test)]
fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn no_endpoint_means_no_exporter() {
        assert_eq!(
            otlp_settings(env_of(&[]), "sandbox-controller").unwrap(),
            None
        );
        assert_eq!(
            otlp_settings(env_of(&[("OTEL_SERVICE_NAME", "x")]), "sandbox-controller").unwrap(),
            None
        );
        assert_eq!(
            otlp_settings(
                env_of(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                    ("OTEL_TRACES_EXPORTER", "none")
                ]),
                "sandbox-controller"
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn endpoint_enables_grpc_with_the_binary_service_name() {
        let s = otlp_settings(
            env_of(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://collector:4317",
            )]),
            "extensions-controller",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.protocol, OtlpProtocol::Grpc);
        assert_eq!(s.service_name, "extensions-controller");

        let s = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_SERVICE_NAME", "my-sandboxes"),
            ]),
            "sandbox-controller",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.protocol,
            OtlpProtocol::HttpProtobuf,
            "the traces variable wins"
        );
        assert_eq!(s.service_name, "my-sandboxes");
    }

    #[test]
    fn unknown_protocol_is_a_clear_error() {
        let err = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon"),
            ]),
            "sandbox-controller",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && msg.contains("carrier-pigeon"),
            "{msg}"
        );
    }

    #[test]
    fn sampler_and_queue_variables_are_checked() {
        let err = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_TRACES_SAMPLER", "sometimes"),
            ]),
            "sandbox-controller",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OTEL_TRACES_SAMPLER") && err.contains("parentbased_traceidratio"),
            "{err}"
        );
        let err = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ]),
            "sandbox-controller",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("OTEL_TRACES_SAMPLER_ARG"), "{err}");
        let s = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                ("OTEL_BSP_SCHEDULE_DELAY", "50"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            ]),
            "sandbox-controller",
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.queue.schedule_delay, Duration::from_millis(50));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        let err = otlp_settings(
            env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
            ]),
            "sandbox-controller",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("OTEL_BSP_MAX_QUEUE_SIZE"), "{err}");
    }

    #[test]
    fn http_json_is_a_clear_error() {
        let mut settings = otlp_settings(
            env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]),
            "x",
        )
        .unwrap()
        .unwrap();
        settings.protocol = OtlpProtocol::HttpJson;
        let err = otlp_exporter::build(&settings).unwrap_err();
        assert!(err.to_string().contains("http/protobuf"), "{err}");
    }

    #[test]
    fn trace_context_round_trips_through_the_json_carrier() {
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(
                current_context_json(),
                None,
                "outside a span there is nothing to write"
            );

            let span = tracing::info_span!("ReconcileTest");
            let _entered = span.enter();
            let json = current_context_json().expect("a span has a context");
            let map: HashMap<String, String> = serde_json::from_str(&json).unwrap();
            assert_eq!(map.len(), 1, "no empty tracestate: {json}");
            let traceparent = &map["traceparent"];
            assert!(
                traceparent.starts_with("00-") && traceparent.ends_with("-01"),
                "{traceparent}"
            );

            let parent = context_from_json(&json).unwrap();
            let original = span.context();
            assert_eq!(
                parent.span().span_context().trace_id(),
                original.span().span_context().trace_id()
            );

            let child = tracing::info_span!("Child");
            child.set_parent(parent).unwrap();
            assert_eq!(
                child.context().span().span_context().trace_id(),
                original.span().span_context().trace_id(),
                "a span parented from the annotation joins the same trace"
            );
        });
        assert!(context_from_json("not json").is_err());
    }

    /// Marks the child run of `init_child_logs`; `init` installs a global subscriber, which
    /// only one test per process can do, so each scenario runs in its own child process.
    const CHILD_MARKER: &str = "CONTROLLER_COMMON_TELEMETRY_CHILD";

    /// Runs `init_child_logs` in a child process with `args` as its flags (`;`-separated) and
    /// `env`, and returns its stderr.
    fn run_child(args: &str, env: &[(&str, &str)]) -> String {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            "telemetry::tests::init_child_logs",
            "--nocapture",
            "--test-threads=1",
        ]);
        for name in [
            "RUST_LOG",
            "LOG_FORMAT",
            "ZAP_LOG_LEVEL",
            "ZAP_ENCODER",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_TRACES_EXPORTER",
            "OTEL_SERVICE_NAME",
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
        ] {
            cmd.env_remove(name);
        }
        cmd.env(CHILD_MARKER, args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "child failed:\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    #[test]
    fn json_logs_are_one_object_per_line_with_fields() {
        let stderr = run_child("--log-format=json", &[]);
        let line = stderr
            .lines()
            .find(|l| l.contains("child reconciled"))
            .unwrap_or_else(|| panic!("no log line: {stderr}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["message"], "child reconciled");
        assert_eq!(v["object"], "ops/sandbox-1");
        assert!(
            !stderr.contains("hidden debug line"),
            "info level filters debug: {stderr}"
        );
    }

    #[test]
    fn text_logs_and_level_flag() {
        let stderr = run_child("--log-format=text;--log-level=debug", &[]);
        let line = stderr
            .lines()
            .find(|l| l.contains("child reconciled"))
            .unwrap_or_else(|| panic!("no log line: {stderr}"));
        assert!(
            line.contains("INFO") && line.contains("object=\"ops/sandbox-1\""),
            "{line}"
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_err(),
            "text, not JSON"
        );
        assert!(
            stderr.contains("hidden debug line"),
            "debug level shows debug: {stderr}"
        );
    }

    #[test]
    fn an_unreachable_collector_does_not_block_and_shutdown_is_bounded() {
        // Port 1 on loopback refuses connections: the exporter can never deliver.
        for protocol in ["grpc", "http/protobuf"] {
            let stderr = run_child(
                "--log-format=text",
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ],
            );
            assert!(stderr.contains("exporting traces over OTLP"), "{stderr}");
            assert!(stderr.contains("spans recorded: 5000"), "{stderr}");
        }
    }

    #[test]
    fn https_collectors_are_supported_on_both_transports() {
        for protocol in ["grpc", "http/protobuf"] {
            let stderr = run_child(
                "--log-format=text",
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:1"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20token"),
                ],
            );
            assert!(!stderr.contains("INIT-ERROR"), "{protocol}: {stderr}");
            assert!(
                stderr.contains("spans recorded: 5000"),
                "{protocol}: {stderr}"
            );
        }
    }

    #[test]
    fn a_missing_ca_bundle_is_a_clear_startup_error() {
        let stderr = run_child(
            "--log-format=text",
            &[
                (
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "https://collector.example:4318",
                ),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ],
        );
        let line = stderr
            .lines()
            .find(|l| l.contains("INIT-ERROR"))
            .unwrap_or_else(|| panic!("init did not fail: {stderr}"));
        assert!(
            line.contains("OTEL_EXPORTER_OTLP_CERTIFICATE") && line.contains("/nonexistent/ca.pem"),
            "{line}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn init_child_logs() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let Ok(flags) = std::env::var(CHILD_MARKER) else {
            // Run directly (not as a child): init must refuse a second global subscriber.
            let args = Cli::try_parse_from(["test", "--log-format=text"])
                .unwrap()
                .common;
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
            let err = init(&args, "test-controller")
                .err()
                .expect("second init fails");
            assert!(err.to_string().contains("already installed"), "{err}");
            return;
        };
        let argv = std::iter::once("test").chain(flags.split(';').filter(|s| !s.is_empty()));
        let args = Cli::try_parse_from(argv).unwrap().common;
        let guard = match init(&args, "test-controller") {
            Ok(guard) => guard,
            Err(e) => {
                eprintln!("INIT-ERROR: {e}");
                return;
            }
        };
        tracing::info!(object = "ops/sandbox-1", "child reconciled");
        tracing::debug!("hidden debug line");
        let mut recorded = 0;
        for _ in 0..5000 {
            let span = tracing::info_span!("ReconcileSandbox");
            let _entered = span.enter();
            recorded += 1;
        }
        tracing::info!("spans recorded: {recorded}");
        guard.shutdown().await;
    }
}
