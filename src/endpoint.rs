//! Whether an instance's public endpoint answers (issue 23, item 3): one HTTP
//! request for the instance's health path, with the instance's host, sent to
//! the address its Ingress reports, as a client outside the cluster sends it.
//! An address alone proves nothing: a controller that stopped leaves the
//! address it published, and a simulated one publishes an address where
//! nothing listens (docs/incidents.md #1).
//!
//! This module is the check only: what to ask ([`Target`]), how it went
//! ([`Answer`], with the status message naming the step that failed) and a
//! bounded runner ([`Checker`]: a timeout per request, a limit on requests in
//! flight, so checks never hold a reconcile of another instance for longer
//! than the timeout). `reconcile::endpoint_check::confirm` calls it where a
//! region enables the check.
//!
//! Plain HTTP/1.1 over a TCP connection, written here (a request line and a
//! few headers; only the status line and headers of the response are read): no
//! HTTP client dependency for one GET. `https` is not checked yet.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

/// The response header that names the instance which answered (the stand-in
/// image sends it; an answer without it is not checked for identity).
pub const IDENTITY_HEADER: &str = "x-kura-account";

/// The most of a response read: the status line and headers.
const MAX_HEAD: usize = 16 * 1024;

/// What to ask, for one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The address the instance's Ingress reports (an IP or a hostname).
    pub address: String,
    pub port: u16,
    /// The instance's host: the request's `Host` header.
    pub host: String,
    /// The health path, e.g. `/up`.
    pub path: String,
    /// The account the answer must come from (see [`IDENTITY_HEADER`]).
    pub account: String,
}

/// How the request went. Only [`Answer::Answered`] makes an instance active.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 2xx from the instance itself.
    Answered,
    /// The Ingress reports no address: nothing to ask.
    NoAddress {
        ingress: String,
    },
    Refused {
        error: String,
    },
    TimedOut {
        after: Duration,
    },
    /// The connection failed otherwise, or the answer was not HTTP.
    Failed {
        error: String,
    },
    /// An HTTP status other than 2xx: the controller's (404: no route for the
    /// host; 502/503: no backend answers) or the instance's.
    Status {
        code: u16,
    },
    /// Another instance answered.
    WrongInstance {
        account: String,
    },
}

impl Answer {
    pub fn answered(&self) -> bool {
        matches!(self, Answer::Answered)
    }

    /// The status message: the step that failed, with the address and port.
    pub fn message(&self, target: &Target) -> String {
        let url = format!(
            "http://{}{} via {}:{}",
            target.host, target.path, target.address, target.port
        );
        match self {
            Answer::Answered => format!("{url} answered"),
            Answer::NoAddress { ingress } => {
                format!("Ingress {ingress} has no address: no ingress controller serves its class")
            }
            Answer::Refused { error } => format!("{url}: connection refused ({error})"),
            Answer::TimedOut { after } => {
                format!("{url}: no answer within {}s", after.as_secs_f64())
            }
            Answer::Failed { error } => format!("{url}: {error}"),
            Answer::Status { code } => format!("{url}: HTTP {code}"),
            Answer::WrongInstance { account } => format!(
                "{url}: answered by account {account:?}, not {:?} (another instance's backend)",
                target.account
            ),
        }
    }
}

/// Runs checks with a timeout each and at most `concurrency` in flight
/// (shared by every reconcile of the process).
#[derive(Clone, Debug)]
pub struct Checker {
    timeout: Duration,
    slots: Arc<Semaphore>,
}

impl Checker {
    pub fn new(timeout: Duration, concurrency: usize) -> Checker {
        Checker {
            timeout,
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    /// One request. Once the probe finds the workload available on the
    /// desired revision and the Ingress with an address,
    /// `reconcile::endpoint_check::confirm` calls this for the primary host
    /// and treats any answer but [`Answer::Answered`] as "not active yet",
    /// with [`Answer::message`] in the reason. Waiting for a slot counts in
    /// the timeout: a check never holds its reconcile for longer than the
    /// timeout.
    pub async fn check(&self, target: &Target) -> Answer {
        let timeout = self.timeout;
        let run = async {
            let _slot = self.slots.acquire().await.expect("never closed");
            ask(target).await
        };
        tokio::time::timeout(timeout, run)
            .await
            .unwrap_or(Answer::TimedOut { after: timeout })
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

/// The verdict on a response's head (status line and headers).
fn judge(head: &str, account: &str) -> Answer {
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let code = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|c| c.parse::<u16>().ok());
    let Some(code) = code else {
        return Answer::Failed {
            error: format!("not an HTTP answer: {:?}", truncate(status_line, 80)),
        };
    };
    if !(200..300).contains(&code) {
        return Answer::Status { code };
    }
    let identity = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case(IDENTITY_HEADER))
        .map(|(_, value)| value.trim().to_string());
    match identity {
        Some(other) if other != account => Answer::WrongInstance { account: other },
        _ => Answer::Answered,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
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
            .check(&target(port))
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
        let answer = Checker::new(Duration::from_secs(5), 4).check(&t).await;
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
        let answer = Checker::new(Duration::from_secs(5), 4).check(&t).await;
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
        let answer = Checker::new(Duration::from_secs(5), 4).check(&t).await;
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
            .check(&target(port))
            .await;
        assert_eq!(
            answer,
            Answer::TimedOut {
                after: Duration::from_millis(300)
            }
        );
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn waiting_for_a_slot_counts_in_the_timeout() {
        let checker = Checker::new(Duration::from_millis(300), 1);
        let _slot = checker.slots.clone().acquire_owned().await.unwrap();
        let started = std::time::Instant::now();
        let answer = checker.check(&target(9)).await;
        assert!(matches!(answer, Answer::TimedOut { .. }), "{answer:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn what_is_not_http_is_said() {
        assert!(matches!(
            judge("SSH-2.0-OpenSSH\r\n", "acme"),
            Answer::Failed { .. }
        ));
        assert_eq!(
            judge("HTTP/1.0 204 No Content\r\n\r\n", "acme"),
            Answer::Answered
        );
        assert_eq!(
            judge("HTTP/1.1 404 Not Found\r\n\r\n", "acme"),
            Answer::Status { code: 404 }
        );
    }
}
