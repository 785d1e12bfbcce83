//! Mutating requests per namespace from the apiserver's audit log
//! (scripts/control-plane.sh audits every create/update/patch/delete at Metadata
//! level), read from where the log ended when a phase began.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::Serialize;

use crate::BenchResult;

/// Where the log ended, in which file: the apiserver rotates by renaming, so
/// the file keeps its inode under its new name.
pub struct Mark {
    offset: u64,
    inode: Option<u64>,
    at: Timestamp,
}

impl Mark {
    pub fn now(path: &Path) -> Mark {
        let meta = std::fs::metadata(path).ok();
        Mark {
            offset: meta.as_ref().map_or(0, |m| m.len()),
            inode: meta.map(|m| m.ino()),
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

/// The audit entries of requests in `namespaces` received since `mark`,
/// Events left out: what both readers below count.
fn entries_since(
    path: &Path,
    mark: &Mark,
    namespaces: &[String],
) -> BenchResult<Vec<serde_json::Value>> {
    entries_with(path, mark, namespaces, false)
}

/// The audit entries of requests in `namespaces` since `mark`, with the
/// Events when `events`.
fn entries_with(
    path: &Path,
    mark: &Mark,
    namespaces: &[String],
    events: bool,
) -> BenchResult<Vec<serde_json::Value>> {
    let namespaces: std::collections::BTreeSet<&str> =
        namespaces.iter().map(String::as_str).collect();
    Ok(read_since(path, mark)?
        .lines()
        // A line cut by rotation does not parse.
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| {
            let r = &e["objectRef"];
            let at = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok());
            r["namespace"]
                .as_str()
                .is_some_and(|ns| namespaces.contains(ns))
                && (events || r["resource"] != "events")
                && at.is_some_and(|t| t >= mark.at)
        })
        .collect())
}

/// Requests in `namespaces` since `mark`, excluding Events.
pub fn count(
    path: &Path,
    mark: &Mark,
    namespaces: &[String],
    client_user: &str,
) -> BenchResult<Counts> {
    let mut counts = Counts::default();
    for e in entries_since(path, mark, namespaces)? {
        let r = &e["objectRef"];
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

/// Who made a request: the user a client impersonates (each reference client
/// runs as its own, `bench-<client>`), else the authenticated user; kura-sim,
/// which shares the admin kubeconfig, by its user agent.
fn actor(e: &serde_json::Value) -> String {
    if e["userAgent"]
        .as_str()
        .is_some_and(|a| a.starts_with("kura-sim/"))
    {
        return "kura-sim".into();
    }
    e["impersonatedUser"]["username"]
        .as_str()
        .or(e["user"]["username"].as_str())
        .unwrap_or("")
        .to_string()
}

/// One user's mutating requests in a phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UserRequests {
    /// Every mutating request but Events, `verb resource[/subresource]` → count.
    pub requests: BTreeMap<String, u64>,
    /// Events created or patched (core and events.k8s.io).
    pub events: u64,
}

/// Mutating requests in `namespaces` since `mark`, by user ([`actor`]).
pub fn by_user(
    path: &Path,
    mark: &Mark,
    namespaces: &[String],
) -> BenchResult<BTreeMap<String, UserRequests>> {
    let mut out: BTreeMap<String, UserRequests> = BTreeMap::new();
    for e in entries_with(path, mark, namespaces, true)? {
        let r = &e["objectRef"];
        let user = out.entry(actor(&e)).or_default();
        if r["resource"] == "events" {
            user.events += 1;
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
        *user.requests.entry(request).or_default() += 1;
    }
    Ok(out)
}

/// A mutating request of a replica that impersonates `replica-<name>` (the
/// shards proof), Events and status writes left out.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaWrite {
    pub replica: String,
    pub verb: String,
    /// `namespace/resource/name`.
    pub object: String,
    /// The apiserver's answer: a replica killed with a request in flight gets
    /// a 504 logged, whether or not the write then lands.
    pub code: i64,
}

/// The replicas' writes of objects (not statuses, not Events) in
/// `namespaces` since `mark`.
pub fn replica_writes(
    path: &Path,
    mark: &Mark,
    namespaces: &[String],
) -> BenchResult<Vec<ReplicaWrite>> {
    let mut out = Vec::new();
    for e in entries_since(path, mark, namespaces)? {
        let r = &e["objectRef"];
        let Some(replica) = e["impersonatedUser"]["username"]
            .as_str()
            .and_then(|u| u.strip_prefix("replica-"))
        else {
            continue;
        };
        if !r["subresource"].is_null() {
            continue;
        }
        out.push(ReplicaWrite {
            replica: replica.to_string(),
            verb: e["verb"].as_str().unwrap_or("").to_string(),
            object: format!(
                "{}/{}/{}",
                r["namespace"].as_str().unwrap_or(""),
                r["resource"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or("")
            ),
            code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
        })
    }
    Ok(out)
}

/// Objects more than one replica wrote with success among `writes`, each
/// with the replicas that did.
pub fn written_by_two(writes: &[ReplicaWrite]) -> BTreeMap<String, Vec<String>> {
    let mut by: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for w in writes.iter().filter(|w| (200..300).contains(&w.code)) {
        by.entry(w.object.clone())
            .or_default()
            .insert(w.replica.clone());
    }
    by.into_iter()
        .filter(|(_, who)| who.len() > 1)
        .map(|(o, who)| (o, who.into_iter().collect()))
        .collect()
}

/// The log from the mark on: the rest of the marked file, and when the
/// apiserver rotated it since (renamed it to `audit-<time>.log` and started a
/// new one), every backup after it and the current file whole; an error if
/// the marked file was rotated away. When the log did not exist at the mark,
/// every backup modified since is read whole; the timestamp filter of
/// [`count`] drops what is older.
fn read_since(path: &Path, mark: &Mark) -> BenchResult<String> {
    let current =
        std::fs::metadata(path).map_err(|e| format!("audit log {}: {e}", path.display()))?;
    if Some(current.ino()) == mark.inode {
        return read_from(path, mark.offset);
    }
    let mut backups = backups(path)?;
    backups.sort();
    let marked = backups
        .iter()
        .position(|(_, ino, _)| Some(*ino) == mark.inode);
    let mut text = String::new();
    match (marked, mark.inode) {
        (Some(k), _) => {
            text.push_str(&read_from(&backups[k].0, mark.offset)?);
            for (b, ..) in &backups[k + 1..] {
                text.push_str(&std::fs::read_to_string(b)?);
            }
        }
        // Counting from here on would miss requests: say so.
        (None, Some(_)) => {
            return Err(format!(
                "audit log {}: the file marked at {} was rotated away; keep more backups (KURA_AUDIT_MAXBACKUP)",
                path.display(),
                mark.at
            )
            .into());
        }
        (None, None) => {
            let since = std::time::SystemTime::from(mark.at);
            for (b, ..) in backups.iter().filter(|(.., m)| *m >= since) {
                text.push_str(&std::fs::read_to_string(b)?);
            }
        }
    }
    text.push_str(&std::fs::read_to_string(path)?);
    Ok(text)
}

fn read_from(path: &Path, offset: u64) -> BenchResult<String> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The rotated logs beside `path` (named by the time of their rotation, so
/// sorting by name orders them): path, inode, modification time.
fn backups(path: &Path) -> BenchResult<Vec<(PathBuf, u64, std::time::SystemTime)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path.parent().unwrap_or(Path::new(".")))? {
        let p = entry?.path();
        let rotated = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"));
        if let (true, Ok(m)) = (rotated, std::fs::metadata(&p)) {
            out.push((p, m.ino(), m.modified()?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("kura-bench-audit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn append(path: &Path, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn by_user_names_the_impersonated_user_and_counts_events_apart() {
        let d = dir("users");
        let log = d.join("audit.log");
        append(&log, "");
        let mark = Mark::now(&log);
        let line = |user: &str, as_user: Option<&str>, agent: &str, resource: &str| {
            let mut e = serde_json::json!({
                "verb": "patch", "user": {"username": user}, "userAgent": agent,
                "objectRef": {"namespace": "ns", "resource": resource},
                "requestReceivedTimestamp": Timestamp::now().to_string(),
            });
            if let Some(u) = as_user {
                e["impersonatedUser"] = serde_json::json!({"username": u});
            }
            e.to_string() + "\n"
        };
        append(
            &log,
            &line("admin", Some("bench-peer"), "kura-peer", "configmaps"),
        );
        append(
            &log,
            &line("admin", Some("bench-peer"), "kura-peer", "events"),
        );
        append(&log, &line("admin", None, "kura-sim/1", "pods"));
        append(&log, &line("admin", None, "kura-bench", "kurainstances"));
        let users = by_user(&log, &mark, &["ns".to_string()]).unwrap();
        let peer = &users["bench-peer"];
        assert_eq!((peer.requests["patch configmaps"], peer.events), (1, 1));
        assert_eq!(users["kura-sim"].requests["patch pods"], 1);
        assert_eq!(users["admin"].requests["patch kurainstances"], 1);
    }

    #[test]
    fn without_a_rotation_the_rest_of_the_file_is_read() {
        let d = dir("plain");
        let log = d.join("audit.log");
        append(&log, "before\n");
        let mark = Mark::now(&log);
        append(&log, "after\n");
        assert_eq!(read_since(&log, &mark).unwrap(), "after\n");
    }

    #[test]
    fn a_rotation_is_followed_even_when_the_new_file_outgrew_the_mark() {
        let d = dir("rotated");
        let log = d.join("audit.log");
        append(&log, "before\n");
        let mark = Mark::now(&log);
        append(&log, "after-1\n");
        std::fs::rename(&log, d.join("audit-2026-12-02T10-00-00.000.log")).unwrap();
        // The new file is longer than the offset of the mark: reading it from
        // that offset (what a length check alone would do) loses "after-2".
        append(&log, "after-2-and-much-more\n");
        let text = read_since(&log, &mark).unwrap();
        assert_eq!(text, "after-1\nafter-2-and-much-more\n");
    }

    #[test]
    fn a_marked_file_rotated_away_is_an_error_not_an_undercount() {
        let d = dir("gone");
        let log = d.join("audit.log");
        append(&log, "before\n");
        let mark = Mark::now(&log);
        // Rotated twice with one backup kept: the marked file is gone (the
        // new file exists before the old one is removed, so it cannot reuse
        // the old one's inode).
        let old = d.join("old");
        std::fs::rename(&log, &old).unwrap();
        append(&log, "after\n");
        std::fs::remove_file(&old).unwrap();
        let e = read_since(&log, &mark).unwrap_err().to_string();
        assert!(e.contains("KURA_AUDIT_MAXBACKUP"), "{e}");
    }
}
