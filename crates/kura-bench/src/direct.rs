//! The ceiling: the children `kura-operator render` prints, server-side applied
//! straight into a namespace by a client doing what the operator's apply does
//! (kube-rs, the operator's field manager, `--concurrency` instances in flight,
//! each in the same two waves), but with no watches, no status and no decisions.

use std::collections::BTreeMap;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt, future::try_join_all};
use kube::Client;
use kube::api::{Patch, PatchParams};
use serde::Deserialize;
use serde_json::Value;

use kura_core::keys::{FIELD_MANAGER, LABEL_INSTANCE};
use kura_core::render::ObjectId;
use kura_operator::reconcile::apply::dynamic_api;

use crate::cluster::Bench;
use crate::fleet::{Watched, wait_all};
use crate::report::{Direct, secs};
use crate::{Args, BenchResult, audit};

pub async fn run(args: &Args, bench: &Bench) -> BenchResult<Direct> {
    let n = args.instances();
    let namespaces = bench.namespaces_of(&bench.direct_ns);
    let watched = Watched::start(&bench.client, &namespaces).await?;
    let mut out = Direct::default();
    for version in [1, 2] {
        let (groups, render_time) = render(args, bench, version)?;
        let what = if version == 1 { "create" } else { "change" };
        eprintln!("kura-bench: direct {what}: applying {n} instances' children");
        let mark = audit::Mark::now(&args.audit_log());
        let start = Instant::now();
        apply_all(&bench.client, &groups, args.concurrency.into()).await?;
        let elapsed = secs(start.elapsed());
        eprintln!("kura-bench: direct {what}: {elapsed:.2}s");
        // Let the controller manager finish the pods, so its work does not load
        // the next phase. Over several namespaces the next phase after the
        // change is the direct fleet's removal, which stops its rollouts: their
        // settling (about 40 min at N=10,000, the controller manager restarting
        // 10,000 pods) would load nothing that is measured.
        if version == 1 || bench.spread == 1 {
            wait_all(
                "direct: StatefulSet rollouts",
                n,
                args.phase_timeout(),
                || watched.rolled_out(),
            )
            .await?;
        }
        let requests = audit::count(&args.audit_log(), &mark, &namespaces, &bench.user)?;
        if version == 1 {
            out.render_s = render_time;
            out.create_s = elapsed;
            out.create_requests = requests.by_client;
        } else {
            out.change_s = elapsed;
            out.change_requests = requests.by_client;
        }
        out.objects = groups.iter().map(Vec::len).sum();
    }
    Ok(out)
}

/// `kura-operator render` of the N instances under configuration `version`;
/// the objects grouped by instance, and the render's wall time.
fn render(args: &Args, bench: &Bench, version: u32) -> BenchResult<(Vec<Vec<Value>>, f64)> {
    let config = bench.workdir.join(format!("direct-config-v{version}.yaml"));
    std::fs::write(&config, bench.config(version))?;
    let manifests = bench.workdir.join("direct-instances.yaml");
    let mut text = String::new();
    for i in 0..args.instances() {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&Bench::instance(
            &bench.namespace_of(&bench.direct_ns, i),
            i,
        ))?);
    }
    std::fs::write(&manifests, text)?;
    let start = Instant::now();
    let output = std::process::Command::new(args.operator_bin())
        .arg("render")
        .arg("-f")
        .arg(&manifests)
        .arg("--config")
        .arg(&config)
        .output()?;
    let elapsed = secs(start.elapsed());
    if !output.status.success() {
        return Err(format!(
            "kura-operator render failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_slice(&output.stdout) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue; // the comment lines before the first document
        }
        let object: Value = serde_json::to_value(value)?;
        let instance = object["metadata"]["labels"][LABEL_INSTANCE]
            .as_str()
            .unwrap_or_default()
            .to_string();
        groups.entry(instance).or_default().push(object);
    }
    if groups.len() != args.instances() {
        return Err(format!(
            "render printed objects of {} instances, not {}",
            groups.len(),
            args.instances()
        )
        .into());
    }
    Ok((groups.into_values().collect(), elapsed))
}

/// The operator's wave order (`ChildKind::wave`): what the workload and the
/// ingresses depend on goes first.
fn wave(object: &Value) -> u8 {
    object_id(object).map_or(0, |id| id.kind.wave())
}

/// The identity of a manifest read back from `kura-operator render`.
fn object_id(object: &Value) -> Option<ObjectId> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    Some(ObjectId {
        kind: kura_core::kind::ChildKind::parse(
            object["apiVersion"].as_str()?,
            object["kind"].as_str()?,
        )?,
        namespace: text(&object["metadata"]["namespace"]),
        name: text(&object["metadata"]["name"]).unwrap_or_default(),
    })
}

pub async fn apply_all(
    client: &Client,
    groups: &[Vec<Value>],
    concurrency: usize,
) -> BenchResult<()> {
    futures::stream::iter(groups)
        .map(|objects| apply_instance(client, objects))
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn apply_instance(client: &Client, objects: &[Value]) -> BenchResult<()> {
    for w in 0..=1 {
        let batch = objects.iter().filter(|o| wave(o) == w).map(|o| async move {
            let id = object_id(o).ok_or("a rendered object of an unknown kind")?;
            dynamic_api(client, &id)
                .patch(
                    &id.name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(o),
                )
                .await
                .map_err(|e| format!("applying {id}: {e}"))
        });
        try_join_all(batch).await?;
    }
    Ok(())
}
