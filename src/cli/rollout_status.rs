//! `kura-operator rollout status`: follows a fleet change until it is done,
//! halted, or the time given runs out. Read-only: it lists (and with
//! `--watch` watches) KuraInstances and reads what their status reports; the
//! verdict is `kura_core::rollout::progress`'s.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kura_core::api::{KuraInstance, KuraInstanceStatus};
use kura_core::rollout::progress::{Counts, Seen, Summary, Verdict, summarize};

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Namespace of the instances (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,

    /// Instances of every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,

    /// Follow the change until it is done or halted (or `--timeout` runs out).
    #[arg(short = 'w', long)]
    watch: bool,

    /// Give up after this long (e.g. `90s`, `10m`): exit code 2, naming the
    /// instances not done.
    #[arg(long, value_parser = kura_core::time::parse_duration)]
    timeout: Option<Duration>,

    /// Kubeconfig to use; in-cluster or $KUBECONFIG when absent.
    #[arg(long, env = "KURA_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
}

/// The server ends each watch request after this long and the watcher makes
/// another: an idle fleet sends nothing for minutes.
const WATCH_SECONDS: u32 = 60;

/// Cells of the terminal's progress bar.
const BAR_WIDTH: usize = 24;

/// Prints where the change stands; the exit code is the verdict's
/// (`Verdict::exit_code`: 0 done, 1 halted, 2 in progress when the wait is
/// over). An error (no cluster, no access) is the caller's exit code 3.
pub fn status(args: StatusArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: StatusArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // A read may stay silent for as long as a watch request lasts.
    let read_timeout = Duration::from_secs(u64::from(WATCH_SECONDS) + 15);
    let client = kura_operator::run::client(args.kubeconfig.as_deref(), read_timeout).await?;
    let api: Api<KuraInstance> = match (args.all_namespaces, &args.namespace) {
        (true, _) => Api::all(client),
        (false, Some(ns)) => Api::namespaced(client, ns),
        (false, None) => {
            let ns = client.default_namespace().to_string();
            Api::namespaced(client, &ns)
        }
    };
    let deadline = args.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut out = Output::new(std::io::stdout().is_terminal());
    let code = if args.watch {
        follow(api, deadline, &mut out).await?
    } else {
        once(api, deadline, &mut out).await?
    };
    Ok(ExitCode::from(code))
}

/// One list, one verdict.
async fn once(
    api: Api<KuraInstance>,
    deadline: Option<tokio::time::Instant>,
    out: &mut Output,
) -> Result<u8, Box<dyn std::error::Error>> {
    let list = within(deadline, api.list(&ListParams::default())).await;
    let Some(list) = list else {
        out.conclude("timed out before the instances were listed");
        return Ok(Verdict::InProgress.exit_code());
    };
    let fleet: Fleet = list
        .map_err(|e| unreadable(&e))?
        .items
        .into_iter()
        .map(|i| (key(&i), (i.metadata.generation, i.status)))
        .collect();
    let summary = summary_of(&fleet);
    let verdict = summary.verdict();
    out.show(&summary);
    out.conclude(&summary.conclusion(&verdict, false));
    Ok(verdict.exit_code())
}

/// Each instance's generation and status, by `namespace/name`.
type Fleet = BTreeMap<String, (Option<i64>, Option<KuraInstanceStatus>)>;

/// Watches until the verdict is not "in progress", or the deadline.
async fn follow(
    api: Api<KuraInstance>,
    deadline: Option<tokio::time::Instant>,
    out: &mut Output,
) -> Result<u8, Box<dyn std::error::Error>> {
    let config = watcher::Config::default().timeout(WATCH_SECONDS);
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut fleet = Fleet::new();
    // The instances of a (re)list, until it is complete.
    let mut listing: Option<Fleet> = None;
    let mut listed = false;
    let mut last: Option<Summary> = None;
    // The records go when the instances are done: the change followed keeps
    // its name to the end.
    let mut revision: Option<String> = None;
    loop {
        let Some(event) = within(deadline, events.next()).await else {
            return Ok(timed_out(last.as_ref(), out));
        };
        let mut event = event.ok_or("the watch of KuraInstances ended")?;
        // Take what has arrived already before deciding: a burst of status
        // writes is one redraw, not one per write.
        loop {
            match event {
                Ok(e) => apply(e, &mut fleet, &mut listing, &mut listed),
                // Before the first list, nothing could be read: an error to
                // report (no access, no CRD). After it, the watcher retries.
                Err(e) if !listed => return Err(watch_failed(&e).into()),
                Err(e) => out.warn(&format!("watching KuraInstances: {e}; retrying")),
            }
            match events.next().now_or_never() {
                Some(Some(next)) => event = next,
                _ => break,
            }
        }
        if !listed {
            continue;
        }
        let mut summary = summary_of(&fleet);
        match &summary.fleet_revision {
            Some(seen) => revision = Some(seen.clone()),
            None => summary.fleet_revision.clone_from(&revision),
        }
        out.show(&summary);
        let verdict = summary.verdict();
        if verdict != Verdict::InProgress {
            out.conclude(&summary.conclusion(&verdict, false));
            return Ok(verdict.exit_code());
        }
        last = Some(summary);
    }
}

fn apply(
    event: watcher::Event<KuraInstance>,
    fleet: &mut Fleet,
    listing: &mut Option<Fleet>,
    listed: &mut bool,
) {
    let entry = |i: KuraInstance| (key(&i), (i.metadata.generation, i.status));
    match event {
        watcher::Event::Init => *listing = Some(Fleet::new()),
        watcher::Event::InitApply(i) => {
            let (k, v) = entry(i);
            listing.get_or_insert_default().insert(k, v);
        }
        watcher::Event::InitDone => {
            *fleet = listing.take().unwrap_or_default();
            *listed = true;
        }
        watcher::Event::Apply(i) => {
            let (k, v) = entry(i);
            fleet.insert(k, v);
        }
        watcher::Event::Delete(i) => {
            fleet.remove(&key(&i));
        }
    }
}

fn timed_out(last: Option<&Summary>, out: &mut Output) -> u8 {
    match last {
        Some(summary) => out.conclude(&summary.conclusion(&Verdict::InProgress, true)),
        None => out.conclude("timed out before the instances were listed"),
    }
    Verdict::InProgress.exit_code()
}

/// `future`'s output, or None once `deadline` has passed.
async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    future: F,
) -> Option<F::Output> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, future).await.ok(),
        None => Some(future.await),
    }
}

/// Why KuraInstances cannot be read, in the user's terms.
fn unreadable(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => {
            "KuraInstances cannot be listed: the CRD kurainstances.kura.dev is not installed (kubectl apply -f crds/)".into()
        }
        kube::Error::Api(s) if s.code == 403 => {
            format!("KuraInstances cannot be listed: {} (403)", s.message)
        }
        e => format!("KuraInstances cannot be listed: {e}"),
    }
}

fn watch_failed(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => unreadable(e),
        e => format!("KuraInstances cannot be watched: {e}"),
    }
}

fn key(i: &KuraInstance) -> String {
    format!(
        "{}/{}",
        i.metadata.namespace.as_deref().unwrap_or_default(),
        i.metadata.name.as_deref().unwrap_or_default()
    )
}

fn summary_of(fleet: &Fleet) -> Summary {
    summarize(fleet.iter().map(|(key, (generation, status))| Seen {
        key,
        generation: *generation,
        status: status.as_ref(),
    }))
}

/// A terminal gets one bar redrawn in place; anything else a line per
/// change of the counts. Writes to a reader that went away are dropped: the
/// answer is the exit code.
struct Output {
    terminal: bool,
    shown: Option<(Counts, Option<String>)>,
}

impl Output {
    fn new(terminal: bool) -> Output {
        Output {
            terminal,
            shown: None,
        }
    }

    fn show(&mut self, summary: &Summary) {
        let now = (summary.counts, summary.fleet_revision.clone());
        if self.shown.as_ref() == Some(&now) {
            return;
        }
        self.shown = Some(now);
        if self.terminal {
            // Back to the line's start and clear it: the bar is redrawn in place.
            write_out(&format!("\r\x1b[2K{}", summary.bar(BAR_WIDTH)));
        } else {
            write_out(&format!("{}\n", summary.line()));
        }
    }

    fn end_bar(&mut self) {
        if self.terminal && self.shown.is_some() {
            write_out("\n");
            self.shown = None;
        }
    }

    fn warn(&mut self, message: &str) {
        self.end_bar();
        eprintln!("kura-operator: {message}");
    }

    fn conclude(&mut self, message: &str) {
        self.end_bar();
        write_out(&format!("{message}\n"));
    }
}

fn write_out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
