//! Whether an instance's public endpoint answers (issue 23, item 3), the pure
//! half: what to ask ([`Target`]), how it went ([`Answer`], with the status
//! message naming the step that failed) and the verdict on a response's head
//! ([`judge`]). An address alone proves nothing: a controller that stopped
//! leaves the address it published, and a simulated one publishes an address
//! where nothing listens (docs/incidents.md #1).
//!
//! The request itself is I/O: the operator's `endpoint::Checker` sends it.

pub mod addresses;

use std::time::Duration;

/// The response header that names the instance which answered (the stand-in
/// image sends it; an answer without it is not checked for identity).
pub const IDENTITY_HEADER: &str = "x-kura-account";

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

impl Target {
    /// What is asked, and where: `http://<host><path> via <address>:<port>`.
    pub fn url(&self) -> String {
        format!(
            "http://{}{} via {}:{}",
            self.host, self.path, self.address, self.port
        )
    }
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
        let url = target.url();
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

/// The verdict on a response's head (status line and headers).
pub fn judge(head: &str, account: &str) -> Answer {
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
