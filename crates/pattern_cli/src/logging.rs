//! Where the binary's diagnostics go: log lines to stderr (`RUST_LOG`, else warnings or more
//! with `-v`), and traces over OTLP when the standard OpenTelemetry variables name a collector.
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set and `OTEL_SDK_DISABLED` is not `true`. They are sent as OTLP over HTTP with JSON
//! bodies (every OpenTelemetry collector accepts it, on port 4318 by default) by a background
//! thread, in batches; [`Diagnostics::shutdown`] sends what is left. The spans are those of
//! `pattern_core::telemetry` (agent runs, model requests, tool calls, named after the GenAI
//! semantic conventions) and one per HTTP request of `pattern serve`. `OTEL_SERVICE_NAME`
//! names the service (default `pattern`); `OTEL_TRACES_SAMPLER` and the exporter's other
//! standard variables apply.
//!
//! This module must never fail a command because the collector is unreachable (the exporter
//! drops what it cannot send and says so in the log), and never print a header value.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// What was set up; [`shutdown`](Self::shutdown) before the process exits.
#[derive(Debug)]
pub(crate) struct Diagnostics {
    traces: Option<SdkTracerProvider>,
}

impl Diagnostics {
    /// Sends the spans still buffered (bounded by the exporter's timeout).
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.traces
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: could not send the last traces: {e}");
        }
    }
}

/// Installs the log output and, when configured, the trace exporter.
pub(crate) fn init(verbose: u8) -> Diagnostics {
    // The MCP SDK logs a server's failures itself; Pattern reports them once, with what they
    // mean for the agent (a warning naming the server), so its own lines start at -v.
    let default = match verbose {
        0 => "warn,rmcp=off",
        1 => "info,rmcp=warn",
        2 => "debug",
        _ => "trace",
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_filter(filter);
    let traces = match exporter() {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("warning: traces are off: {e}");
            None
        }
    };
    let otel = traces.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("pattern"))
            // The exporter's own HTTP client and the database driver stay out of the traces.
            .with_filter(EnvFilter::new(
                "info,sqlx=warn,reqwest=off,hyper=off,hyper_util=off,h2=off,opentelemetry=off",
            ))
    });
    let _ = tracing_subscriber::registry()
        .with(log)
        .with(otel)
        .try_init();
    Diagnostics { traces }
}

/// The OTLP trace pipeline, when the environment names a collector.
fn exporter() -> Result<Option<SdkTracerProvider>, String> {
    let set = |key: &str| std::env::var(key).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if disabled
        || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .build()
        .map_err(|e| e.to_string())?;
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if !set("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name("pattern");
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}
