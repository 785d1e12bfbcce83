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
use kura_core::api::{Condition, ConditionStatus, KuraInstance};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::operator::{
    Operator, Options, ReadyInstance, apply_acme, config_with_default_check, scenario,
    shared_class, wait_ready,
};
use crate::support::*;

const T: Duration = Duration::from_secs(90);

/// Plays the ingress controller and its backend on 127.0.0.1: every request
/// gets the response set last.
struct Backend {
    port: u16,
    response: Arc<Mutex<&'static str>>,
    /// How long it takes to answer.
    delay: Arc<Mutex<Duration>>,
    /// Requests served so far.
    served: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start(response: &'static str) -> Backend {
        Self::start_slow(response, Duration::ZERO).await
    }

    /// Answers each request `delay` after reading it.
    async fn start_slow(response: &'static str, delay: Duration) -> Backend {
        Self::start_on(0, response, delay).await
    }

    /// On `port` (0: any free one).
    async fn start_on(port: u16, response: &'static str, delay: Duration) -> Backend {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let response = Arc::new(Mutex::new(response));
        let serving = response.clone();
        let delay = Arc::new(Mutex::new(delay));
        let slow = delay.clone();
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counting = served.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = *serving.lock().unwrap();
                let delay = *slow.lock().unwrap();
                let counting = counting.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    tokio::time::sleep(delay).await;
                    let _ = conn.write_all(answer.as_bytes()).await;
                    counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        Backend {
            port,
            response,
            delay,
            served,
            task,
        }
    }

    fn answer_after(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }

    fn served(&self) -> usize {
        self.served.load(std::sync::atomic::Ordering::SeqCst)
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
    apply_acme(instances).await;
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
    apply_acme(instances).await;
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

/// Plays an address that drops packets, as a client sees it: connections are
/// taken and never answered, so every check waits out its timeout (3 s).
struct Silent {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    async fn start() -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        Silent { port, task }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Endpoints that never answer hold no reconcile worker: with one worker
/// (`--concurrency 1`) and three instances whose checks each wait out the
/// 3 s timeout again at every recheck, every instance still gets its reason
/// naming the timeout, and no reconcile lasts as long as a check (the
/// reconcile duration histogram: all under 2.048 s). Before, the check was
/// awaited inside the reconcile: each of these reconciles took the full 3 s
/// (bucket 4.096), and about five such instances per worker kept every
/// worker busy, other instances waiting behind them.
#[tokio::test]
async fn endpoints_that_never_answer_hold_no_reconcile_worker() {
    let silent = Silent::start().await;
    let s = scenario("endpoint-silent", &["--concurrency", "1"]).await;
    let (op, instances, ns) = (&s.op, &s.instances, &s.ns);
    op.set_config(&checked_config(&ns.name, silent.port, true));
    crate::operator::create_fleet(instances, "silent", 3).await;
    wait_for("three instances naming the check's timeout", T, || async {
        let list = instances.list(&Default::default()).await.ok()?;
        let timed_out = list
            .items
            .iter()
            .filter(|i| {
                i.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.reason == "EndpointNotAnswering"
                            && c.message.contains("no answer within 3s")
                    })
                })
            })
            .count();
        (timed_out == 3).then_some(())
    })
    .await;
    // More checks time out while the instances wait (a recheck per resync).
    let checks = "kura_endpoint_checks_total{result=\"timed-out\"}";
    wait_for("six timed-out checks", T, || async {
        (op.metric(checks).await? >= 6.0).then_some(())
    })
    .await;
    let count = op
        .metric("kura_reconcile_duration_seconds_count")
        .await
        .unwrap();
    let quick = op
        .metric("kura_reconcile_duration_seconds_bucket{le=\"2.048\"}")
        .await
        .unwrap();
    assert!(count > 0.0);
    assert_eq!(
        quick, count,
        "every reconcile under 2.048 s while checks take 3 s"
    );
    s.finish().await;
}

/// An answer slower than a reconcile waits for (1 s) still counts: the
/// instance goes Ready on it. After a restart the new process knows no
/// answer yet: the instance, Ready before, stays Ready while it is asked
/// again, so its status is not written at all (without that it would go not
/// Ready, `EndpointChecking`, and back: two writes and two Events per instance
/// at every restart). An instance that answers is asked about once per
/// resync (3 s here), not at every reconcile (before, each pass asked, and
/// waited for the answer).
#[tokio::test]
async fn a_slow_answer_counts_a_restart_keeps_ready_and_a_resync_asks_once() {
    let backend = Backend::start_slow(OK_ACME, Duration::from_secs(1)).await;
    let mut s = scenario("endpoint-slow", &[]).await;
    let ns = s.ns.name.clone();
    s.op.set_config(&checked_config(&ns, backend.port, true));
    apply_acme(&s.instances).await;
    wait_ready(&s.instances, "acme").await;
    let before = s.instances.get("acme").await.unwrap();

    let served = backend.served();
    s.op.restart(&[]);
    let op = &s.op;
    wait_for(
        "the endpoint asked again, and a pass after its answer",
        T,
        || async {
            let answered = op
                .metric("kura_endpoint_checks_total{result=\"answered\"}")
                .await?;
            let converged = op
                .metric("kura_reconciles_total{result=\"converged\"}")
                .await?;
            (answered >= 1.0 && converged >= 2.0).then_some(())
        },
    )
    .await;
    let after = s.instances.get("acme").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "no status write across the restart: {:?}",
        after.status
    );

    // Once per resync, not per reconcile: eight annotation changes, each a
    // reconcile that probes, in a few seconds, and the endpoint is asked
    // about once per resync (3 s) in that time. Before, each pass asked.
    // (Answering at once from here: a slow answer would itself space the
    // requests, one running at a time.)
    backend.answer_after(Duration::ZERO);
    let converged = "kura_reconciles_total{result=\"converged\"}";
    let started = std::time::Instant::now();
    let served_before = backend.served().max(served);
    let reconciles_before = op.metric(converged).await.unwrap();
    for poke in 1..=8 {
        let patch = serde_json::json!({"metadata": {"annotations": {"test.kura.dev/poke": poke.to_string()}}});
        s.instances
            .patch(
                "acme",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
        wait_for("the poke reconciled", T, || async {
            (op.metric(converged).await? >= reconciles_before + f64::from(poke)).then_some(())
        })
        .await;
    }
    let asked = backend.served() - served_before;
    let resyncs = started.elapsed().as_secs_f64() / 3.0;
    assert!(
        (asked as f64) <= resyncs.ceil() + 1.0,
        "{asked} requests for 8 reconciles in {resyncs:.1} resyncs"
    );
    s.finish().await;
}

/// At the chart's resync (ten minutes) an instance that answers is asked by
/// its own check once per resync; the addresses where instances answered are
/// asked every 10 s besides (one request per address). So a controller that
/// stops (here the listener playing it closes: connections refused) takes
/// Ready away within 30 s, reason EndpointNotAnswering, the message naming
/// the refused connection; listening again, the instance is Ready again (its
/// own checks, every activation recheck, find it).
///
/// Without the address watch (a build before it: `KURA_TEST_OPERATOR_BIN`)
/// the instance stays Ready for the rest of the resync: the wait for not
/// Ready times out.
#[tokio::test]
async fn a_stopped_controller_is_noticed_within_30_s_at_the_charts_resync() {
    let backend = Backend::start(OK_ACME).await;
    let port = backend.port;
    let ns = TestNamespace::new("endpoint-stopped").await;
    let classes = shared_class(&ns).await;
    let options = Options {
        resync: Some("10m".into()),
        ..Options::default()
    };
    let op = Operator::start_with(
        &ns.name,
        &checked_config(&ns.name, port, true),
        &[],
        options,
    );
    let s = ReadyInstance {
        op,
        instances: ns.api(),
        classes,
        ns,
    };
    apply_acme(&s.instances).await;
    wait_ready(&s.instances, "acme").await;

    drop(backend);
    let stopped = std::time::Instant::now();
    let down = wait_for(
        "Ready False within 30 s of the controller stopping",
        Duration::from_secs(30),
        || async {
            let s = s.instances.get("acme").await.ok()?.status?;
            let c = s.conditions.iter().find(|c| c.type_ == "Ready")?;
            (c.status == ConditionStatus::False).then(|| c.clone())
        },
    )
    .await;
    eprintln!(
        "not Ready {:?} after the controller stopped: {}",
        stopped.elapsed(),
        down.message
    );
    assert_eq!(down.reason, "EndpointNotAnswering", "{down:?}");
    assert!(
        down.message
            .contains(&format!("via 127.0.0.1:{port}: connection refused")),
        "{}",
        down.message
    );

    let _backend = Backend::start_on(port, OK_ACME, Duration::ZERO).await;
    wait_ready(&s.instances, "acme").await;
    s.finish().await;
}
