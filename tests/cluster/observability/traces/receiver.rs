//! An OTLP/HTTP trace receiver inside the test: it plays the collector a
//! cluster would run beside the operator. `POST /v1/traces` with an
//! `ExportTraceServiceRequest` (protobuf), decoded with the
//! `opentelemetry-proto` types and kept for the test to read; over plain
//! HTTP, or over TLS with a certificate of a private CA (`start_tls`).

pub mod tls;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// One span as received, with its resource's attributes.
#[derive(Clone, Debug)]
pub struct Received {
    pub resource: Vec<KeyValue>,
    pub span: Span,
}

#[derive(Clone, Default)]
struct Inbox {
    spans: Arc<Mutex<Vec<Received>>>,
    requests: Arc<Mutex<usize>>,
    handshakes_failed: Arc<Mutex<usize>>,
}

pub struct Receiver {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for the operator (the exporter adds `/v1/traces`).
    pub endpoint: String,
    inbox: Inbox,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        Receiver::serve(listener, endpoint, Inbox::default())
    }

    /// The receiver over TLS, its certificate (for 127.0.0.1) signed by a CA
    /// made in `dir`; the CA's certificate is `tls::CA` in `dir`.
    pub async fn start_tls(dir: &std::path::Path) -> Receiver {
        let acceptor = tls::acceptor(dir);
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("https://{}", tcp.local_addr().unwrap());
        let inbox = Inbox::default();
        let listener = tls::Listener {
            tcp,
            acceptor,
            handshakes_failed: inbox.handshakes_failed.clone(),
        };
        Receiver::serve(listener, endpoint, inbox)
    }

    fn serve<L: axum::serve::Listener>(listener: L, endpoint: String, inbox: Inbox) -> Receiver
    where
        L::Addr: std::fmt::Debug,
    {
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(inbox.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver {
            endpoint,
            inbox,
            task,
        }
    }

    /// TLS handshakes that failed (a client that does not trust the CA).
    pub fn handshakes_failed(&self) -> usize {
        *self.inbox.handshakes_failed.lock().unwrap()
    }

    pub fn spans(&self) -> Vec<Received> {
        self.inbox.spans.lock().unwrap().clone()
    }

    /// Export requests received, decodable or not.
    pub fn requests(&self) -> usize {
        *self.inbox.requests.lock().unwrap()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn export(State(inbox): State<Inbox>, body: Bytes) -> impl IntoResponse {
    *inbox.requests.lock().unwrap() += 1;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut spans = inbox.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| r.attributes)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            spans.extend(scope.spans.into_iter().map(|span| Received {
                resource: resource.clone(),
                span,
            }));
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        answer,
    )
        .into_response()
}

/// An attribute's value as text (strings as they are, numbers in decimal).
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

/// Lowercase hex, as trace ids are written in logs and exemplars.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
