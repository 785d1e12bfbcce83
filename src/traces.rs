//! Logs and traces. Traces are OpenTelemetry spans of each reconcile, exported
//! over OTLP/HTTP (protobuf; plain or TLS, `tls`) when the standard `OTEL_*`
//! environment asks for them, and off otherwise: then there is no exporter, no thread and no layer,
//! and a span costs what a `tracing` span costs.
//!
//! The spans: `reconcile` (namespace, instance, revision, origin) with the
//! children `decide`, `apply_wave` (one per wave of the apply), `prune`,
//! `probe` and `status_write`; `reconcile_gateway` (namespace, gateway,
//! revision) with `decide`, `apply_wave` and `status_write`. Each reconcile is
//! a trace of its own; its id is the `trace_id` field of its span in the JSON
//! log and the exemplar of `controller_runtime_reconcile_time_seconds`.
//!
//! A fleet rollout (one configuration and release: the fleet revision) has
//! no process of its own to be a trace, so its instances' reconciles link to
//! a trace id derived from the fleet revision ([`rollout_context`]): every
//! reconcile carrying the same rollout links to the same id, and a backend
//! finds them all from one. Under those ids each process exports the
//! rollout's own span, `fleet_rollout`, once per revision.

mod tls;

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use opentelemetry::KeyValue;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use sha2::Digest;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Whether spans are exported, as the environment says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Off,
    Otlp,
}

/// The exporter set up at start-up (none when traces are off): flushed by [`shutdown`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// How long one export request may take unless `OTEL_EXPORTER_OTLP_TIMEOUT`
/// says otherwise (the specification's default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// A collector's answer is a few bytes; more is not read.
const MAX_RESPONSE: usize = 64 * 1024;

/// Reads the standard variables (`env` is `std::env::var`, or a test's map).
/// An endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) or `OTEL_TRACES_EXPORTER=otlp` turns export
/// on; `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true` keeps it off. What
/// this exporter cannot do (gRPC, TLS, another exporter) is an error at
/// start-up rather than spans silently lost.
pub fn export_from(env: impl Fn(&str) -> Option<String>) -> Result<Export, String> {
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(Export::Off);
    }
    let asked = match set("OTEL_TRACES_EXPORTER").as_deref() {
        None => false,
        Some("otlp") => true,
        Some("none") => return Ok(Export::Off),
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={other}: only otlp and none are supported"
            ));
        }
    };
    let endpoint =
        set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
    if endpoint.is_none() && !asked {
        return Ok(Export::Off);
    }
    if let Some(url) = endpoint.filter(|u| !u.starts_with("http://") && !u.starts_with("https://"))
    {
        return Err(format!(
            "OTLP endpoint {url}: only http:// and https:// are supported"
        ));
    }
    export_timeout(&env)?;
    // The certificates are read here too, so that a bad one stops the start.
    tls::client_config(&env)?;
    let protocol =
        set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => Ok(Export::Otlp),
        Some(other) => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other}: only http/protobuf is supported"
        )),
    }
}

/// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds as the specification has
/// it; 10 s when neither is set. A value that is not a whole number of
/// milliseconds above 0 is an error at start-up, naming the variable.
pub fn export_timeout(env: impl Fn(&str) -> Option<String>) -> Result<Duration, String> {
    let found = [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| {
        env(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .map(|v| (name, v))
    });
    let Some((name, value)) = found else {
        return Ok(EXPORT_TIMEOUT);
    };
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{name}={value}: expected the export timeout in milliseconds, a whole number above 0"
        )),
    }
}

/// Starts logging (`format` "text" or "json", filtered by `KURA_LOG`) and, when
/// `export` says so, the span exporter, whose requests run on `runtime`.
pub fn init(format: &str, export: Export, runtime: tokio::runtime::Handle) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KURA_LOG")
        .unwrap_or_else(|_| "info,kube=warn".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let fmt = if format == "json" {
        fmt.json().flatten_event(true).boxed()
    } else {
        fmt.boxed()
    };
    let otel = match export {
        Export::Off => None,
        Export::Otlp => {
            let provider = provider(runtime)?;
            let tracer = provider.tracer("kura-operator");
            let _ = PROVIDER.set(provider);
            // The operator's own spans only: kube's ("reconciling object",
            // HTTP) would each be a trace of their own.
            let ours = tracing_subscriber::filter::Targets::new()
                .with_target("kura_operator", tracing::Level::INFO);
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(ours),
            )
        }
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(())
}

fn provider(runtime: tokio::runtime::Handle) -> Result<SdkTracerProvider, String> {
    let timeout = export_timeout(|k| std::env::var(k).ok())?;
    // http:// or https:// as the endpoint says; https verified by `tls`.
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls::client_config(|k| std::env::var(k).ok())?)
        .https_or_http()
        .enable_http1()
        .build();
    let client = RuntimeClient {
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
        runtime,
        timeout,
    };
    // Endpoint, headers and sampler come from the environment (the SDK reads them).
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(client)
        .with_timeout(timeout)
        .build()
        .map_err(|e| format!("OTLP trace exporter: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_id_generator(DerivedOrRandomIds::default())
        .with_resource(resource(|k| std::env::var(k).ok()))
        .build())
}

/// `service.name` is kura-operator unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` names it; the release is `service.version`.
fn resource(env: impl Fn(&str) -> Option<String>) -> opentelemetry_sdk::Resource {
    use opentelemetry_sdk::resource::{EnvResourceDetector, ResourceDetector};
    let attributes: Box<dyn ResourceDetector> = Box::new(EnvResourceDetector::new());
    let mut builder = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name("kura-operator")
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_detectors(&[attributes]);
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
        builder = builder.with_service_name(name.trim().to_string());
    }
    builder.build()
}

/// Sends the spans still buffered and stops the exporter; nothing when traces
/// are off. Called after the operator's work ended, off the runtime's threads
/// (the last export runs on them).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown()
    {
        eprintln!("kura-operator: flushing traces: {e}");
    }
}

/// Whether spans are exported (the work for links is skipped when not).
pub fn exporting() -> bool {
    PROVIDER.get().is_some()
}

/// Names the object of a pass in its exported span by OpenTelemetry's
/// semantic conventions where one exists (`k8s.namespace.name`), and under
/// `kura.` where none does (`kura.instance.name`, `kura.gateway.name`,
/// given as `attribute`). Exported spans only: the log keeps its short
/// field names (`namespace`, `instance`, `gateway`), which its readers grep.
pub fn name_object(span: &tracing::Span, attribute: &'static str, namespace: &str, name: &str) {
    if !exporting() {
        return;
    }
    span.set_attribute("k8s.namespace.name", namespace.to_string());
    span.set_attribute(attribute, name.to_string());
}

/// The trace `span` belongs to, when it is exported (sampled).
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    if !exporting() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.is_valid() && span_context.is_sampled())
        .then(|| span_context.trace_id().to_string())
}

/// Names the trace in `span`'s `trace_id` field (declared empty), so that
/// each log line of the reconcile carries it.
pub fn record_trace_id(span: &tracing::Span) {
    if let Some(id) = trace_id(span) {
        span.record("trace_id", id.as_str());
    }
}

/// The span a fleet rollout's reconciles link to: trace id and span id are
/// the first 16 and next 8 bytes of SHA-256("kura.dev/rollout/" + fleet
/// revision), so every process and every reconcile of the same rollout
/// derives the same ones.
pub fn rollout_context(fleet_revision: &str) -> SpanContext {
    let digest = sha2::Sha256::digest(format!("kura.dev/rollout/{fleet_revision}"));
    let mut trace = [0u8; 16];
    trace.copy_from_slice(&digest[..16]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&digest[16..24]);
    SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes(span),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    )
}

/// Links `span` to its fleet rollout's trace ([`rollout_context`]), whose
/// span this process exports the first time it links to it
/// ([`rollout_span`]).
pub fn link_rollout(span: &tracing::Span, fleet_revision: &str) {
    rollout_span(fleet_revision);
    span.add_link_with_attributes(
        rollout_context(fleet_revision),
        vec![KeyValue::new(
            "kura.fleet_revision",
            fleet_revision.to_string(),
        )],
    );
}

/// The fleet rollout's own span, `fleet_rollout`, with the ids derived from
/// its revision ([`rollout_context`]): exported once per process and
/// revision, so that a backend searched for the rollout's trace id finds a
/// span (the reconciles' links alone name a trace nobody sent). Another
/// replica, or this process after a restart, sends the same span again: the
/// same ids and attributes, which a backend shows once or twice but never as
/// two rollouts.
fn rollout_span(fleet_revision: &str) {
    use opentelemetry::trace::{Span as _, Tracer as _};
    static SENT: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let Some(provider) = PROVIDER.get() else {
        return;
    };
    if !SENT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(fleet_revision.to_string())
    {
        return;
    }
    let ids = rollout_context(fleet_revision);
    let tracer = provider.tracer("kura-operator");
    NEXT_IDS.with(|next| next.set(Some((ids.trace_id(), ids.span_id()))));
    let mut span = tracer
        .span_builder("fleet_rollout")
        .with_attributes(vec![KeyValue::new(
            "kura.fleet_revision",
            fleet_revision.to_string(),
        )])
        .start_with_context(&tracer, &opentelemetry::Context::new());
    NEXT_IDS.with(|next| next.set(None));
    span.end();
}

thread_local! {
    /// The ids the next root span built on this thread takes instead of
    /// random ones: set around the build of [`rollout_span`] only.
    static NEXT_IDS: std::cell::Cell<Option<(TraceId, SpanId)>> =
        const { std::cell::Cell::new(None) };
}

/// The SDK's random ids, except for a span built while [`NEXT_IDS`] is set.
/// (The SDK asks for the span id first, then, for a root span, the trace id.)
#[derive(Debug, Default)]
struct DerivedOrRandomIds(opentelemetry_sdk::trace::RandomIdGenerator);

impl opentelemetry_sdk::trace::IdGenerator for DerivedOrRandomIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(std::cell::Cell::get)
            .map_or_else(|| self.0.new_trace_id(), |(trace, _)| trace)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(std::cell::Cell::get)
            .map_or_else(|| self.0.new_span_id(), |(_, span)| span)
    }
}

/// The exporter's HTTP client: hyper's (already in the tree through kube),
/// each request run on the operator's runtime. The SDK's batch processor
/// exports from a thread of its own, outside any runtime, where hyper's
/// connections could not be driven.
#[derive(Debug, Clone)]
struct RuntimeClient {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
    runtime: tokio::runtime::Handle,
    /// The bound of one export (`export_timeout`).
    timeout: Duration,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for RuntimeClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let timeout = self.timeout;
        let send = async move {
            let response = client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
        };
        let bounded = async move {
            tokio::time::timeout(timeout, send)
                .await
                .map_err(|_| "OTLP export timed out")?
        };
        self.runtime.spawn(bounded).await?
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn export(vars: &[(&str, &str)]) -> Result<Export, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        export_from(|k| map.get(k).cloned())
    }

    #[test]
    fn without_otel_variables_nothing_is_exported() {
        assert_eq!(export(&[]), Ok(Export::Off));
        assert_eq!(
            export(&[
                ("OTEL_SERVICE_NAME", "kura"),
                ("OTEL_TRACES_SAMPLER", "always_on")
            ]),
            Ok(Export::Off)
        );
    }

    #[test]
    fn an_endpoint_or_the_otlp_exporter_turns_export_on() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(export(&[endpoint]), Ok(Export::Otlp));
        assert_eq!(
            export(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces"
            )]),
            Ok(Export::Otlp)
        );
        assert_eq!(
            export(&[("OTEL_TRACES_EXPORTER", "otlp")]),
            Ok(Export::Otlp)
        );
        assert_eq!(
            export(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            Ok(Export::Otlp)
        );
    }

    #[test]
    fn none_or_a_disabled_sdk_keeps_export_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(
            export(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(Export::Off)
        );
        assert_eq!(
            export(&[endpoint, ("OTEL_SDK_DISABLED", "true")]),
            Ok(Export::Off)
        );
    }

    #[test]
    fn what_this_exporter_cannot_do_is_an_error_not_a_silent_loss() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        let grpc = export(&[endpoint, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")]);
        assert!(grpc.unwrap_err().contains("http/protobuf"));
        let tls = export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")]);
        assert_eq!(tls, Ok(Export::Otlp));
        let unknown = export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://collector:4317")]);
        assert!(unknown.unwrap_err().contains("https://"));
        let ca = export(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
        ]);
        assert!(
            ca.unwrap_err()
                .starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE=")
        );
        let zipkin = export(&[("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(zipkin.unwrap_err().contains("otlp"));
    }

    #[test]
    fn the_export_timeout_is_the_standard_variables_in_milliseconds() {
        let timeout = |vars: &[(&str, &str)]| {
            let map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            export_timeout(|k| map.get(k).cloned())
        };
        assert_eq!(timeout(&[]), Ok(Duration::from_secs(10)));
        assert_eq!(
            timeout(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")]),
            Ok(Duration::from_millis(2500))
        );
        assert_eq!(
            timeout(&[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700")
            ]),
            Ok(Duration::from_millis(700)),
            "the traces' own variable wins"
        );
        for bad in ["0", "10s", "-1"] {
            let err = timeout(&[("OTEL_EXPORTER_OTLP_TIMEOUT", bad)]).unwrap_err();
            assert!(err.contains("OTEL_EXPORTER_OTLP_TIMEOUT") && err.contains("milliseconds"));
        }
        // Checked with the rest of the variables, at start-up.
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert!(export(&[endpoint, ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]).is_err());
    }

    #[test]
    fn a_rollout_links_to_one_trace_derived_from_its_fleet_revision() {
        let a = rollout_context("0123456789abcdef");
        assert_eq!(a, rollout_context("0123456789abcdef"));
        assert!(a.is_valid() && a.is_sampled() && a.is_remote());
        assert_ne!(a.trace_id(), rollout_context("fedcba9876543210").trace_id());
    }

    #[test]
    fn the_service_is_kura_operator_unless_the_environment_names_it() {
        let name = |r: &opentelemetry_sdk::Resource| {
            r.get(&opentelemetry::Key::new("service.name"))
                .map(|v| v.to_string())
        };
        assert_eq!(name(&resource(|_| None)).as_deref(), Some("kura-operator"));
        let named = resource(|k| (k == "OTEL_SERVICE_NAME").then(|| "kura-eu".to_string()));
        assert_eq!(name(&named).as_deref(), Some("kura-eu"));
    }
}
