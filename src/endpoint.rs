//! Whether an instance's public endpoint answers (issue 23, item 3), the I/O
//! half: a bounded runner ([`Checker`]: a timeout per request, a limit on
//! requests in flight). What to ask and the verdict are pure, in
//! `kura_core::endpoint`. `reconcile::endpoint_check` runs it beside the
//! reconcile (never inside it: a reconcile waits at most a moment for the
//! answer) unless a region turns the check off.
//!
//! Plain HTTP/1.1 over a TCP connection, written here (a request line and a
//! few headers; only the status line and headers of the response are read): no
//! HTTP client dependency for one GET. `https` is not checked yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use kura_core::endpoint::addresses::Addresses;
use kura_core::endpoint::{Answer, Target, judge};

/// The most of a response read: the status line and headers.
const MAX_HEAD: usize = 16 * 1024;

/// Runs checks with a timeout each and at most `concurrency` in flight
/// (shared by every check of the process), of which one tenant (a
/// namespace) holds at most a quarter: a tenant whose addresses drop
/// packets holds its slots for a whole timeout each, and without the cap
/// it could fill them all and delay every other tenant's checks.
#[derive(Clone, Debug)]
pub struct Checker {
    timeout: Duration,
    slots: Arc<Semaphore>,
    per_tenant: usize,
    tenants: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    /// The addresses where instances answered, asked on a cadence of their
    /// own (`reconcile::endpoint_check::watch_addresses`).
    addresses: Arc<Mutex<Addresses>>,
}

impl Checker {
    pub fn new(timeout: Duration, concurrency: usize) -> Checker {
        let concurrency = concurrency.max(1);
        Checker {
            timeout,
            slots: Arc::new(Semaphore::new(concurrency)),
            per_tenant: (concurrency / 4).max(1),
            tenants: Arc::default(),
            addresses: Arc::default(),
        }
    }

    /// The watched addresses, under their lock (held for `f` only).
    pub fn addresses<R>(&self, f: impl FnOnce(&mut Addresses) -> R) -> R {
        f(&mut self.addresses.lock().unwrap())
    }

    /// One tenant only (the operator scoped to one namespace): it may use
    /// every slot, there is nobody to be fair to.
    pub fn single_tenant(mut self) -> Checker {
        self.per_tenant = self.slots.available_permits();
        self
    }

    /// One request for `tenant` (the instance's namespace), once a slot of
    /// the tenant's and one of the process's are free. Once the probe finds
    /// the workload available on the desired revision and the Ingress with an
    /// address, `reconcile::endpoint_check` has this run (in a task of its
    /// own) for the primary host and treats any answer but
    /// [`Answer::Answered`] as "not active yet", with [`Answer::message`] in
    /// the reason. The timeout counts from the request, not from the wait for
    /// a slot: many slow endpoints delay the checks of others, they do not
    /// make them time out.
    pub async fn check(&self, tenant: &str, target: &Target) -> Answer {
        let tenant_slots = self.tenant(tenant);
        let tenant_slot = tenant_slots.acquire().await.expect("never closed");
        let slot = self.slots.acquire().await.expect("never closed");
        let answer = tokio::time::timeout(self.timeout, ask(target))
            .await
            .unwrap_or(Answer::TimedOut {
                after: self.timeout,
            });
        drop((slot, tenant_slot));
        self.forget_idle(tenant, tenant_slots);
        answer
    }

    fn tenant(&self, tenant: &str) -> Arc<Semaphore> {
        let mut tenants = self.tenants.lock().unwrap();
        tenants
            .entry(tenant.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone()
    }

    /// Drops a tenant's slots once nobody holds or waits for them: the map
    /// holds the tenants with checks in flight, not every tenant ever seen.
    fn forget_idle(&self, tenant: &str, slots: Arc<Semaphore>) {
        let mut tenants = self.tenants.lock().unwrap();
        drop(slots);
        if tenants
            .get(tenant)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            tenants.remove(tenant);
        }
    }
}

async fn ask(target: &Target) -> Answer {
    let mut conn =
        match tokio::net::TcpStream::connect((target.address.as_str(), target.port)).await {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Answer::Refused {
                    error: e.to_string(),
                };
            }
            Err(e) => {
                return Answer::Failed {
                    error: format!("cannot connect: {e}"),
                };
            }
        };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: kura-operator\r\nConnection: close\r\n\r\n",
        target.path, target.host
    );
    if let Err(e) = conn.write_all(request.as_bytes()).await {
        return Answer::Failed {
            error: format!("cannot send the request: {e}"),
        };
    }
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        match conn.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => {
                return Answer::Failed {
                    error: format!("cannot read the answer: {e}"),
                };
            }
        }
    }
    judge(&String::from_utf8_lossy(&head), &target.account)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn target(port: u16) -> Target {
        Target {
            address: "127.0.0.1".into(),
            port,
            host: "acme.r1.kura.test".into(),
            path: "/up".into(),
            account: "acme".into(),
        }
    }

    /// A server that answers one connection with `response` after reading the
    /// request, and hands the request back.
    async fn serve_once(response: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            conn.write_all(response.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap()
        });
        (port, task)
    }

    #[tokio::test]
    async fn a_2xx_from_the_instance_is_an_answer_and_the_request_names_host_and_path() {
        let (port, server) =
            serve_once("HTTP/1.1 200 OK\r\nx-kura-account: acme\r\ncontent-length: 3\r\n\r\nok\n")
                .await;
        let answer = Checker::new(Duration::from_secs(5), 4)
            .check("t", &target(port))
            .await;
        assert_eq!(answer, Answer::Answered);
        let request = server.await.unwrap();
        assert!(request.starts_with("GET /up HTTP/1.1\r\n"), "{request}");
        assert!(
            request.contains("\r\nHost: acme.r1.kura.test\r\n"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn another_instances_answer_is_not_this_ones() {
        let (port, _server) =
            serve_once("HTTP/1.1 200 OK\r\nX-Kura-Account: globex\r\n\r\nok\n").await;
        let t = target(port);
        let answer = Checker::new(Duration::from_secs(5), 4).check("t", &t).await;
        assert_eq!(
            answer,
            Answer::WrongInstance {
                account: "globex".into()
            }
        );
        let message = answer.message(&t);
        assert!(message.contains("\"globex\", not \"acme\""), "{message}");
    }

    #[tokio::test]
    async fn a_controllers_503_names_the_status() {
        let (port, _server) = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let t = target(port);
        let answer = Checker::new(Duration::from_secs(5), 4).check("t", &t).await;
        assert_eq!(answer, Answer::Status { code: 503 });
        assert_eq!(
            answer.message(&t),
            format!("http://acme.r1.kura.test/up via 127.0.0.1:{port}: HTTP 503")
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_a_refused_connection_naming_address_and_port() {
        // A port that was free a moment ago: bound, then released.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().port()
        };
        let t = target(port);
        let answer = Checker::new(Duration::from_secs(5), 4).check("t", &t).await;
        assert!(matches!(answer, Answer::Refused { .. }), "{answer:?}");
        assert!(
            answer
                .message(&t)
                .contains(&format!("127.0.0.1:{port}: connection refused")),
            "{}",
            answer.message(&t)
        );
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out_within_the_bound() {
        // Accepts the connection, never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _held = tokio::spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(conn);
        });
        let started = std::time::Instant::now();
        let answer = Checker::new(Duration::from_millis(300), 4)
            .check("t", &target(port))
            .await;
        assert_eq!(
            answer,
            Answer::TimedOut {
                after: Duration::from_millis(300)
            }
        );
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    /// Every slot held by a check that hangs: the next check waits for a
    /// slot, and once it has one its endpoint is asked and answers; the wait
    /// is not counted as the endpoint's time.
    #[tokio::test]
    async fn waiting_for_a_slot_is_not_the_endpoints_timeout() {
        let checker = Checker::new(Duration::from_millis(300), 1);
        let slot = checker.slots.clone().acquire_owned().await.unwrap();
        let (port, _server) =
            serve_once("HTTP/1.1 200 OK\r\nX-Kura-Account: acme\r\n\r\nok\n").await;
        let waiting = tokio::spawn({
            let checker = checker.clone();
            async move { checker.check("t", &target(port)).await }
        });
        // Longer than the timeout, then the slot is free.
        tokio::time::sleep(Duration::from_millis(600)).await;
        drop(slot);
        assert_eq!(waiting.await.unwrap(), Answer::Answered);
    }

    /// One tenant's endpoints drop packets (each check waits its whole
    /// timeout) and it has more checks than the process has slots: another
    /// tenant's check still gets a slot at once and is answered while all of
    /// the first tenant's are still waiting.
    #[tokio::test]
    async fn a_tenant_whose_endpoints_hang_cannot_take_every_slot() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent = listener.local_addr().unwrap().port();
        // The kernel accepts the connections; nobody ever answers.
        let _held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let checker = Checker::new(Duration::from_secs(60), 8);
        let hanging: Vec<_> = (0..16)
            .map(|_| {
                let checker = checker.clone();
                tokio::spawn(async move { checker.check("noisy", &target(silent)).await })
            })
            .collect();
        // Every hanging check that can hold a slot holds one.
        for _ in 0..100 {
            if checker.slots.available_permits() == 8 - checker.per_tenant {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(checker.slots.available_permits(), 8 - 2, "a quarter held");
        let (port, _server) =
            serve_once("HTTP/1.1 200 OK\r\nX-Kura-Account: acme\r\n\r\nok\n").await;
        let quiet = tokio::time::timeout(
            Duration::from_secs(10),
            checker.check("quiet", &target(port)),
        )
        .await
        .expect("the quiet tenant's check got a slot");
        assert_eq!(quiet, Answer::Answered);
        assert!(hanging.iter().all(|h| !h.is_finished()));
        for h in hanging {
            h.abort();
        }
    }
}
