//! The two sources of the configuration after start-up: a file watched for
//! changes, and a ConfigMap watched through the API. Each sends every text it
//! reads (or why it could read none); what the text means is `follow`'s.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use notify::Watcher;
use tokio::sync::mpsc;

use super::CONFIG_MAP_KEY;

/// Reads `path` at once, then whenever its directory changes (a mounted
/// ConfigMap's file is swapped by renaming a symlink there, which a watch of
/// the file alone misses), and every `fallback` in any case. Without a file
/// watch (none available here), every 2 s.
pub fn watch_file(path: PathBuf, texts: mpsc::Sender<io::Result<String>>, fallback: Duration) {
    let (poke_tx, mut poke) = mpsc::channel::<()>(1);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Only what can change the file: its own read is an access event, and
        // answering that with a read would read forever; another file of the
        // directory (a log written beside it) is none of its business.
        if event.is_ok_and(|e| changes_content(&e.kind) && concerns(&e.paths, &name)) {
            // Full: a read is already due, and it will see this change too.
            let _ = poke_tx.try_send(());
        }
    })
    .and_then(|mut w| {
        w.watch(&dir, notify::RecursiveMode::NonRecursive)
            .map(|()| w)
    });
    let every = match &watcher {
        Ok(_) => fallback,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the configuration's directory; reading it every 2s");
            Duration::from_secs(2)
        }
    };
    tokio::spawn(async move {
        // Kept for as long as the file is followed: dropping it ends the watch.
        let _watcher = watcher;
        loop {
            tokio::select! {
                _ = poke.recv() => {}
                _ = tokio::time::sleep(every) => {}
            }
            let read = tokio::fs::read_to_string(&path).await;
            if texts.send(read).await.is_err() {
                return;
            }
        }
    });
}

/// Whether a file event can change what the file holds: created, written,
/// renamed (a mounted ConfigMap's symlink swap), removed. Not an access: the
/// operator's own read is one.
fn changes_content(kind: &notify::EventKind) -> bool {
    use notify::EventKind::{Any, Create, Modify, Other, Remove};
    matches!(kind, Create(_) | Modify(_) | Remove(_) | Any | Other)
}

/// Whether an event of the directory is about the file: its own name, or the
/// `..data` symlink (and its `..data_tmp`) a mounted ConfigMap swaps. An event
/// naming no path may be about anything.
fn concerns(paths: &[PathBuf], name: &std::ffi::OsStr) -> bool {
    paths.is_empty()
        || paths
            .iter()
            .filter_map(|p| p.file_name())
            .any(|n| n == name || n.to_str().is_some_and(|n| n.starts_with("..data")))
}

/// Lists and watches the one ConfigMap `namespace/name` (a field selector on
/// its name, so a Role limited to that name allows it) and sends its
/// `config.yaml` on every change; a deleted ConfigMap, or one without the
/// key, is a text that cannot be read. A failing watch is retried with
/// backoff, the last valid configuration in force meanwhile.
pub fn watch_config_map(
    client: kube::Client,
    namespace: String,
    name: String,
    texts: mpsc::Sender<io::Result<String>>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let text = match event {
                Ok(watcher::Event::Apply(map) | watcher::Event::InitApply(map)) => text_of(&map),
                Ok(watcher::Event::Delete(_)) => Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the ConfigMap was deleted",
                )),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                Err(e) => {
                    tracing::warn!(configmap = %format!("{namespace}/{name}"), error = %e, "watching the configuration failed; retrying");
                    continue;
                }
            };
            if texts.send(text).await.is_err() {
                return;
            }
        }
    });
}

fn text_of(map: &ConfigMap) -> io::Result<String> {
    map.data
        .as_ref()
        .and_then(|d| d.get(CONFIG_MAP_KEY))
        .cloned()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("the ConfigMap has no key {CONFIG_MAP_KEY}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change of the file arrives from the file watch: the fallback read
    /// is an hour away, so only the watch can bring it.
    #[tokio::test]
    async fn a_change_of_the_file_arrives_without_waiting_for_a_poll() {
        let dir = std::env::temp_dir().join(format!("kura-config-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.yaml");
        std::fs::write(&path, "a: 1\n").unwrap();
        let (tx, mut rx) = mpsc::channel(4);
        watch_file(path.clone(), tx, Duration::from_secs(3600));
        // Swapped in by a rename, as the kubelet updates a mounted ConfigMap.
        let tmp = dir.join("config.yaml.tmp");
        std::fs::write(&tmp, "a: 2\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match rx.recv().await {
                    Some(Ok(text)) if text == "a: 2\n" => return text,
                    Some(_) => continue,
                    None => panic!("the watch ended"),
                }
            }
        })
        .await
        .expect("the change within 30 s, with no poll due for an hour");
        assert_eq!(seen, "a: 2\n");
        // Its own reads are no change: an unchanged file is not read again and
        // again (an access event answered with a read reads forever).
        let quiet = tokio::time::timeout(Duration::from_secs(2), async {
            let mut reads = 0;
            while rx.recv().await.is_some() {
                reads += 1;
                if reads > 3 {
                    return reads;
                }
            }
            reads
        })
        .await;
        assert!(quiet.is_err(), "read again and again with nothing changed");
        // Another file of the directory (a log beside it) is not a change of it.
        for i in 0..5 {
            std::fs::write(dir.join("operator.log"), format!("line {i}\n")).unwrap();
        }
        let other = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
        assert!(other.is_err(), "read for another file's change: {other:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
