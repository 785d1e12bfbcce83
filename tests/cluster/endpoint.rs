//! Ready means the endpoint answers (issue 23, items 3 and 5), on a plane
//! without a node: kura-sim publishes 127.0.0.1 as the address of the
//! shared class's Ingresses, and this test plays what would listen there (the
//! ingress controller and the instance behind it) on a port of its own, which
//! the region's `endpointCheck.port` names. What it answers decides. The
//! check is on unless a region turns it off: a region that says nothing of it
//! is asked on port 80, where nothing answers here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use kura_operator::api::{Condition, ConditionStatus, KuraInstance};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::operator::{
    Operator, ReadyInstance, config_with_default_check, instance, scenario, shared_class,
    wait_ready,
};
use crate::support::*;

const T: Duration = Duration::from_secs(90);

/// Plays the ingress controller and its backend on 127.0.0.1: every request
/// gets the response set last.
struct Backend {
    port: u16,
    response: Arc<Mutex<&'static str>>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start(response: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let response = Arc::new(Mutex::new(response));
        let serving = response.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = *serving.lock().unwrap();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        Backend {
            port,
            response,
            task,
        }
    }

    fn answer(&self, response: &'static str) {
        *self.response.lock().unwrap() = response;
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const OK_ACME: &str =
    "HTTP/1.1 200 OK\r\nX-Kura-Account: acme\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
const OK_GLOBEX: &str = "HTTP/1.1 200 OK\r\nX-Kura-Account: globex\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
const UNAVAILABLE: &str =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

fn checked_config(ns: &str, port: u16, enabled: bool) -> String {
    format!(
        "{}    endpointCheck: {{enabled: {enabled}, port: {port}}}\n",
        config_with_default_check(ns, "host", "example.com/none")
    )
}

/// Creates the instance `acme` and waits until its Ready is False because
/// its endpoint does not answer: that condition.
async fn acme_not_answering(instances: &Api<KuraInstance>) -> Condition {
    apply_json(
        instances,
        "test",
        instance("acme", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    ready_condition(
        instances,
        ConditionStatus::False,
        Some("EndpointNotAnswering"),
    )
    .await
}

async fn ready_condition(
    instances: &Api<KuraInstance>,
    want: ConditionStatus,
    reason: Option<&str>,
) -> Condition {
    wait_for(
        &format!("Ready {want:?} (reason {reason:?})"),
        T,
        || async {
            let s = instances.get("acme").await.ok()?.status?;
            let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
            (c.status == want && reason.is_none_or(|r| c.reason == r)).then(|| c.clone())
        },
    )
    .await
}

/// A backend answering 503 keeps the instance not Ready, the message naming
/// the status and where it was asked; once it answers 200 as the instance it
/// is Ready; an answer from another instance's backend (another account) takes
/// Ready away again, naming both accounts. Without the check (before issue 23)
/// the instance went Ready on kura-sim's address alone, whatever answered
/// there: the first wait would time out on Ready True.
#[tokio::test]
async fn ready_only_while_the_instances_endpoint_answers() {
    let backend = Backend::start(UNAVAILABLE).await;
    let s = scenario("endpoint", &[]).await;
    let (op, instances, ns) = (&s.op, &s.instances, &s.ns);
    op.set_config(&checked_config(&ns.name, backend.port, true));
    let down = acme_not_answering(instances).await;
    let asked = format!("http://acme.r1.kura.test/up via 127.0.0.1:{}", backend.port);
    assert!(
        down.message.contains(&format!("{asked}: HTTP 503")),
        "names the status and where it was asked: {}",
        down.message
    );

    backend.answer(OK_ACME);
    wait_ready(instances, "acme").await;

    backend.answer(OK_GLOBEX);
    let wrong = ready_condition(
        instances,
        ConditionStatus::False,
        Some("EndpointNotAnswering"),
    )
    .await;
    assert!(
        wrong.message.contains("\"globex\", not \"acme\""),
        "names who answered: {}",
        wrong.message
    );
    s.finish().await;
}

/// The negative control: the same backend answering 503, with the region's
/// check off, and the instance is Ready all the same (the behaviour before
/// issue 23: an address was enough).
#[tokio::test]
async fn without_the_check_an_address_is_enough_even_when_nothing_answers() {
    let backend = Backend::start(UNAVAILABLE).await;
    let s = scenario("endpoint-off", &[]).await;
    let (op, instances, ns) = (&s.op, &s.instances, &s.ns);
    op.set_config(&checked_config(&ns.name, backend.port, false));
    apply_json(
        instances,
        "test",
        instance("acme", "registry.example/kura:1.0.0"),
    )
    .await
    .unwrap();
    let status = wait_ready(instances, "acme").await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, ConditionStatus::True, "{ready:?}");
    s.finish().await;
}

/// On by default: under a configuration whose region says nothing of the
/// check, the instance stays not Ready, reason EndpointNotAnswering, the
/// message naming the default port and path at kura-sim's address, where
/// nothing answers (the invented address the founding incident waited on).
/// Were the check off by default, it would be Ready as in the test above and
/// the wait would time out.
#[tokio::test]
async fn a_region_that_omits_the_check_is_checked() {
    let ns = TestNamespace::new("endpoint-default").await;
    let classes = shared_class(&ns).await;
    let omitted = config_with_default_check(&ns.name, "host", "example.com/none");
    assert!(!omitted.contains("endpointCheck"), "{omitted}");
    // Started under it: no earlier configuration to have made it Ready.
    let op = Operator::start(&ns.name, &omitted);
    let s = ReadyInstance {
        op,
        instances: ns.api(),
        classes,
        ns,
    };
    let instances = &s.instances;
    let down = acme_not_answering(instances).await;
    assert!(
        down.message
            .contains("http://acme.r1.kura.test/up via 127.0.0.1:80"),
        "names where it was asked (port 80, path /up): {}",
        down.message
    );
    s.finish().await;
}
