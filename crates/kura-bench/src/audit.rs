//! Mutating requests per namespace from the apiserver's audit log
//! (scripts/control-plane.sh audits every create/update/patch/delete at Metadata
//! level), read from where the log ended when a phase began.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::Serialize;

use crate::BenchResult;

pub struct Mark {
    offset: u64,
    at: Timestamp,
}

impl Mark {
    pub fn now(path: &Path) -> Mark {
        Mark {
            offset: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            at: Timestamp::now(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    pub total: u64,
    /// `verb resource[/subresource]` → count.
    pub by_request: BTreeMap<String, u64>,
    pub by_user: BTreeMap<String, u64>,
    /// `verb resource[/subresource]` → count, of the requests the kubeconfig's user
    /// made, but for kura-sim's (the bench's own client and the operator share
    /// that kubeconfig, and so does the simulated kubelet and ingress controller).
    pub by_client: BTreeMap<String, u64>,
}

/// Requests in `namespace` since `mark`, excluding Events.
pub fn count(path: &Path, mark: &Mark, namespace: &str, client_user: &str) -> BenchResult<Counts> {
    let mut counts = Counts::default();
    for line in read_since(path, mark)?.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue; // a line cut by rotation
        };
        let r = &e["objectRef"];
        if r["namespace"] != namespace || r["resource"] == "events" {
            continue;
        }
        let at = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok());
        if at.is_none_or(|t| t < mark.at) {
            continue;
        }
        let sub = r["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let request = format!(
            "{} {}{sub}",
            e["verb"].as_str().unwrap_or(""),
            r["resource"].as_str().unwrap_or("")
        );
        let user = e["user"]["username"].as_str().unwrap_or("").to_string();
        counts.total += 1;
        // kura-sim shares the admin kubeconfig; it names itself in its user agent.
        let agent = e["userAgent"].as_str().unwrap_or("");
        if user == client_user && !agent.starts_with("kura-sim/") {
            *counts.by_client.entry(request.clone()).or_default() += 1;
        }
        *counts.by_request.entry(request).or_default() += 1;
        *counts.by_user.entry(user).or_default() += 1;
    }
    Ok(counts)
}

/// The log from the mark on. After a rotation (the apiserver renamed the file to
/// `audit-<time>.log` and started a new one) the backups written since are read
/// whole; the timestamp filter drops what is older.
fn read_since(path: &Path, mark: &Mark) -> BenchResult<String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("audit log {}: {e}", path.display()))?;
    let len = file.metadata()?.len();
    let mut text = String::new();
    if len >= mark.offset {
        file.seek(SeekFrom::Start(mark.offset))?;
        file.read_to_string(&mut text)?;
        return Ok(text);
    }
    let since = std::time::SystemTime::from(mark.at);
    let mut backups: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap_or(Path::new(".")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
        })
        .filter(|p| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        })
        .collect();
    backups.sort();
    for b in backups.iter().chain(std::iter::once(&path.to_path_buf())) {
        text.push_str(&std::fs::read_to_string(b)?);
    }
    Ok(text)
}
