//! Maintenance windows, deadlines and pauses that end (issue 25), on the real
//! control plane with kura-sim as the kubelet. Windows here open within a
//! minute and last a minute or two; every wait is on a condition.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::operator::{Operator, config, delete_shared_class, instance, shared_class};
use crate::support::*;
use kura_core::api::{ConditionStatus, KuraInstance, KuraInstanceStatus, Phase};

const T: Duration = Duration::from_secs(240);
const TZ: &str = "Asia/Kolkata"; // +05:30: a window's day and hour are local

/// The region's configuration with default pod memory (a change of it is an
/// operator change that restarts every pod) and a `rollout` section.
fn window_config(ns: &str, memory: &str, rollout: &str) -> String {
    format!(
        "{}    defaultResources:\n      requests: {{memory: {memory}}}\nrollout:\n{rollout}",
        config(ns, "host", "example.com/none")
    )
}

/// The first whole minute at least `lead` from now.
fn next_minute(lead: Duration) -> Timestamp {
    let t = Timestamp::now() + SignedDuration::try_from(lead).unwrap();
    let s = t.as_second();
    Timestamp::from_second(s + (60 - s.rem_euclid(60)) % 60).unwrap()
}

/// A window opening at `opens` (on that local day only) for `duration`.
fn window_at(opens: Timestamp, duration: &str) -> serde_json::Value {
    let local = opens.to_zoned(jiff::tz::TimeZone::get(TZ).unwrap());
    json!({
        "days": [format!("{:?}", local.weekday())],
        "start": format!("{:02}:{:02}", local.hour(), local.minute()),
        "duration": duration,
        "timeZone": TZ,
    })
}

/// A window that opened two hours ago and closed an hour ago, every day:
/// closed now, for the next 22 hours.
pub(crate) fn closed_window() -> serde_json::Value {
    let local = (Timestamp::now() - SignedDuration::from_hours(2))
        .to_zoned(jiff::tz::TimeZone::get(TZ).unwrap());
    json!({
        "start": format!("{:02}:{:02}", local.hour(), local.minute()),
        "duration": "1h",
        "timeZone": TZ,
    })
}

fn with_window(name: &str, window: Option<serde_json::Value>) -> serde_json::Value {
    let mut i = instance(name, "registry.example/kura:1.0.0");
    if let Some(w) = window {
        i["spec"]["maintenanceWindow"] = w;
    }
    i
}

async fn status(instances: &Api<KuraInstance>, name: &str) -> KuraInstanceStatus {
    instances
        .get(name)
        .await
        .ok()
        .and_then(|i| i.status)
        .unwrap_or_default()
}

/// The RolloutHeld condition's reason and message, when True.
fn held(s: &KuraInstanceStatus) -> Option<(String, String)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "RolloutHeld" && c.status == ConditionStatus::True)
        .map(|c| (c.reason.clone(), c.message.clone()))
}

async fn template(sts: &Api<StatefulSet>, name: &str) -> String {
    let s = sts.get(name).await.unwrap();
    serde_json::to_string(&s.spec.unwrap().template).unwrap()
}

/// Ready on a revision other than `before`.
async fn wait_moved(instances: &Api<KuraInstance>, name: &str, before: &Option<String>) {
    wait_for(&format!("{name} Ready on a new revision"), T, || async {
        let s = status(instances, name).await;
        (s.phase == Some(Phase::Ready)
            && s.applied_revision == s.desired_revision
            && s.applied_revision != *before)
            .then_some(())
    })
    .await
}

struct Setup {
    op: Operator,
    instances: Api<KuraInstance>,
    sts: Api<StatefulSet>,
    classes: Api<k8s_openapi::api::networking::v1::IngressClass>,
    ns: TestNamespace,
}

impl Setup {
    /// The message of the namespace's first Event with `reason`, if any yet.
    async fn event_note(&self, reason: &str) -> Option<String> {
        let events = self
            .ns
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .ok()?;
        events
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.message)
    }

    async fn new(prefix: &str, rollout: &str, instances: Vec<serde_json::Value>) -> Setup {
        let ns = TestNamespace::new(prefix).await;
        let classes = shared_class(&ns).await;
        let op = Operator::start(&ns.name, &window_config(&ns.name, "256Mi", rollout));
        let api: Api<KuraInstance> = ns.api();
        for i in &instances {
            // Hosts are the cluster's: an account of this namespace's own.
            let mut i = i.clone();
            i["spec"]["account"] = json!(format!(
                "{}-{}",
                i["metadata"]["name"].as_str().unwrap(),
                ns.name
            ));
            apply_json(&api, "test", i).await.unwrap();
        }
        for i in &instances {
            crate::operator::wait_ready(&api, i["metadata"]["name"].as_str().unwrap()).await;
        }
        Setup {
            op,
            instances: api,
            sts: ns.api(),
            classes,
            ns,
        }
    }

    async fn finish(self) {
        drop(self.op);
        delete_shared_class(&self.classes, &self.ns).await;
    }
}

/// A configuration change (the operator's, as a release's would be) waits
/// for the instance's window, says so in status, survives an edit of the
/// window itself (an edit that renders nothing is no user change), and is
/// applied once the window opens, inside it. `b`, with no window, takes it
/// at once.
#[tokio::test]
async fn an_operator_change_waits_for_the_window_and_happens_inside_it() {
    let opens = next_minute(Duration::from_secs(50));
    let closes = opens + SignedDuration::from_mins(3);
    let s = Setup::new(
        "window-wait",
        "  maxUnavailable: 1\n",
        vec![
            with_window("a", Some(window_at(opens, "2m"))),
            with_window("b", None),
        ],
    )
    .await;
    let before_a = status(&s.instances, "a").await.applied_revision;
    let before_b = status(&s.instances, "b").await.applied_revision;
    let template_a = template(&s.sts, "a").await;
    s.op.set_config(&window_config(&s.ns.name, "320Mi", "  maxUnavailable: 1\n"));
    wait_moved(&s.instances, "b", &before_b).await;
    let (reason, message) = wait_for("a waiting for its window", T, || async {
        held(&status(&s.instances, "a").await).filter(|(r, _)| r == "WaitingForWindow")
    })
    .await;
    assert!(
        message.contains(&opens.to_string()) && message.contains("spec.maintenanceWindow"),
        "{reason}: {message}"
    );
    // The metric tells waiting for a window from waiting for the budget.
    wait_for("kura_rollout_instances{state=window} at 1", T, || async {
        let n =
            s.op.metric("kura_rollout_instances{state=\"window\"}")
                .await?;
        (n == 1.0).then_some(())
    })
    .await;
    // Editing the window renders nothing: the change stays the operator's.
    s.instances
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"maintenanceWindow": window_at(opens, "3m")}})),
        )
        .await
        .unwrap();
    wait_for("a's status to show the edited window", T, || async {
        let now = status(&s.instances, "a").await;
        assert_eq!(
            now.applied_revision,
            before_a,
            "a took the change when its window was edited, at {}, before the window opened at {opens}",
            Timestamp::now()
        );
        held(&now).filter(|(_, m)| m.contains("for 3m"))
    })
    .await;
    let seen = Timestamp::now();
    assert!(
        seen < opens,
        "the test's setup took too long: {seen} >= {opens}"
    );
    assert_eq!(status(&s.instances, "a").await.applied_revision, before_a);
    assert_eq!(
        template(&s.sts, "a").await,
        template_a,
        "a's pods restarted at {seen}, before its window opened at {opens}"
    );
    wait_moved(&s.instances, "a", &before_a).await;
    let done = Timestamp::now();
    assert!(
        done >= opens && done < closes,
        "a took the change at {done}, outside its window {opens}..{closes}"
    );
    s.finish().await;
}

/// A user's change (the image) goes at once while the window is closed; the
/// window holds only the operator's changes.
#[tokio::test]
async fn a_users_image_change_goes_at_once_outside_the_window() {
    let s = Setup::new(
        "window-user",
        "  maxUnavailable: 1\n",
        vec![with_window("a", Some(closed_window()))],
    )
    .await;
    let before = status(&s.instances, "a").await.applied_revision;
    let started = std::time::Instant::now();
    s.instances
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": "registry.example/kura:1.1.0"}})),
        )
        .await
        .unwrap();
    wait_moved(&s.instances, "a", &before).await;
    let image = template(&s.sts, "a").await;
    assert!(image.contains("kura:1.1.0"), "{image}");
    assert!(held(&status(&s.instances, "a").await).is_none());
    assert!(started.elapsed() < Duration::from_secs(60));
    s.finish().await;
}

/// With a budget of one and a one-minute window, `a` is admitted as the
/// window opens and its pods (slow to become Ready) finish after it closed:
/// its rollout completes. `b`, next in line, is not admitted once the window
/// closed: it waits for the next opening, a week on.
#[tokio::test]
async fn a_rollout_admitted_in_the_window_completes_and_none_starts_after_it_closes() {
    let opens = next_minute(Duration::from_secs(40));
    let closes = opens + SignedDuration::from_mins(1);
    let s = Setup::new(
        "window-overrun",
        "  maxUnavailable: 1\n",
        vec![
            with_window("a", Some(window_at(opens, "1m"))),
            with_window("b", Some(window_at(opens, "1m"))),
        ],
    )
    .await;
    // From now on a restarted pod is Ready 80 s after it starts.
    Api::<Namespace>::all(s.ns.client.clone())
        .patch(
            &s.ns.name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"sim.kura.dev/ready-delay": "80s"}}}),
            ),
        )
        .await
        .unwrap();
    let before_a = status(&s.instances, "a").await.applied_revision;
    let before_b = status(&s.instances, "b").await.applied_revision;
    let template_b = template(&s.sts, "b").await;
    s.op.set_config(&window_config(&s.ns.name, "320Mi", "  maxUnavailable: 1\n"));
    let next_week = (opens + SignedDuration::from_hours(7 * 24)).to_string();
    wait_for("b waiting for next week's opening", T, || async {
        held(&status(&s.instances, "b").await)
            .filter(|(r, m)| r == "WaitingForWindow" && m.contains(&next_week))
    })
    .await;
    assert!(Timestamp::now() >= closes);
    wait_moved(&s.instances, "a", &before_a).await;
    let done = Timestamp::now();
    assert!(
        done > closes,
        "a finished at {done}, inside the window: no overrun tested"
    );
    // One more pass of b after a freed its slot: still waiting.
    let passes = s.op.metric("kura_reconciles_total{result=\"held\"}").await;
    s.instances
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"test/poke": done.to_string()}}})),
        )
        .await
        .unwrap();
    wait_for("b's pass after the poke", T, || async {
        let now = s.op.metric("kura_reconciles_total{result=\"held\"}").await;
        (now > passes).then_some(())
    })
    .await;
    let b = status(&s.instances, "b").await;
    assert_eq!(
        b.applied_revision, before_b,
        "b took the change after the window closed"
    );
    assert_eq!(
        template(&s.sts, "b").await,
        template_b,
        "b's pods restarted after the window closed"
    );
    assert_eq!(held(&b).map(|h| h.0).as_deref(), Some("WaitingForWindow"));
    s.finish().await;
}

/// `rollout.windowDeadline.after`: a change waits for no window longer than
/// that. The window opens in about 22 hours; the change goes after 20 s.
#[tokio::test]
async fn a_deadline_overrides_the_window() {
    let rollout = "  maxUnavailable: 1\n  windowDeadline:\n    after: 20s\n";
    let s = Setup::new(
        "window-deadline",
        rollout,
        vec![with_window("a", Some(closed_window()))],
    )
    .await;
    let before = status(&s.instances, "a").await.applied_revision;
    let changed = Timestamp::now();
    s.op.set_config(&window_config(&s.ns.name, "320Mi", rollout));
    let (_, message) = wait_for("a waiting for its window, with a deadline", T, || async {
        held(&status(&s.instances, "a").await).filter(|(r, _)| r == "WaitingForWindow")
    })
    .await;
    assert!(message.contains("comes first"), "{message}");
    wait_moved(&s.instances, "a", &before).await;
    let waited = Timestamp::now().duration_since(changed);
    assert!(
        waited >= SignedDuration::from_secs(20) && waited < SignedDuration::from_secs(120),
        "applied after {waited:?}"
    );
    let note = wait_for("the WindowDeadlinePassed Event", T, || {
        s.event_note("WindowDeadlinePassed")
    })
    .await;
    assert!(note.contains("rollout.windowDeadline"), "{note}");
    s.finish().await;
}

/// A pause with an end: while paused, a user's change waits and status says
/// who paused, why and that a change waits; at its end the instance resumes
/// by itself, with an Event.
#[tokio::test]
async fn an_expired_pause_resumes_with_an_event() {
    let s = Setup::new(
        "window-pause",
        "  maxUnavailable: 1\n",
        vec![with_window("a", None)],
    )
    .await;
    let before = status(&s.instances, "a").await.applied_revision;
    let until = Timestamp::now() + SignedDuration::from_secs(30);
    s.instances
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {
                "paused": true,
                "pause": {"by": "alice", "reason": "customer migration", "until": until.to_string()},
            }})),
        )
        .await
        .unwrap();
    wait_for("a Paused", T, || async {
        (status(&s.instances, "a").await.phase == Some(Phase::Paused)).then_some(())
    })
    .await;
    s.instances
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"image": "registry.example/kura:1.1.0"}})),
        )
        .await
        .unwrap();
    let ready = wait_for("a's status to say a change waits", T, || async {
        let s = status(&s.instances, "a").await;
        s.conditions
            .iter()
            // A paused instance has no Ready verdict: Reconciling False
            // (reason Paused) says who, why, until when.
            .find(|c| c.type_ == "Reconciling" && c.message.contains("a change waits"))
            .map(|c| c.message.clone())
    })
    .await;
    assert!(
        ready.contains("alice")
            && ready.contains("customer migration")
            && ready.contains(&until.to_string()),
        "{ready}"
    );
    assert!(Timestamp::now() < until, "the test's setup took too long");
    assert_eq!(status(&s.instances, "a").await.applied_revision, before);
    wait_moved(&s.instances, "a", &before).await;
    assert!(Timestamp::now() >= until);
    let note = wait_for("the PauseExpired Event", T, || s.event_note("PauseExpired")).await;
    assert!(
        note.contains("alice") && note.contains("customer migration"),
        "{note}"
    );
    s.finish().await;
}

/// `kura-operator diff` with a changed configuration says, per instance,
/// that the restart waits for the window and when it would go; an instance
/// without a window restarts at once; a paused one says who paused it.
#[tokio::test]
async fn diff_shows_the_wait_for_a_window() {
    let s = Setup::new(
        "window-diff",
        "  maxUnavailable: 1\n",
        vec![
            with_window("a", Some(closed_window())),
            with_window("b", None),
            with_window("c", None),
        ],
    )
    .await;
    s.instances
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"paused": true, "pause": {"by": "bob", "reason": "audit"}}}),
            ),
        )
        .await
        .unwrap();
    wait_for("c Paused", T, || async {
        (status(&s.instances, "c").await.phase == Some(Phase::Paused)).then_some(())
    })
    .await;
    let dir = std::env::temp_dir().join(format!("kura-window-{}", s.ns.name));
    let cfg = crate::preview::diff::write(
        &dir,
        "config.yaml",
        &window_config(&s.ns.name, "320Mi", "  maxUnavailable: 1\n"),
    );
    let (code, out, err) = crate::preview::diff::diff(
        &kubeconfig_path(),
        &["-n", &s.ns.name, "--config", cfg.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{}/{name}:", s.ns.name)))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_string()
    };
    let a = line("a");
    assert!(
        a.contains("waits for the maintenance window") && a.contains("spec.maintenanceWindow"),
        "{out}"
    );
    assert!(!line("b").contains("maintenance window"), "{out}");
    let c = line("c");
    assert!(
        c.contains("paused, nothing applied")
            && c.contains("paused by bob (audit)")
            && c.contains("a change waits"),
        "{out}"
    );
    assert!(out.contains("1 waiting for a maintenance window"), "{out}");
    // JSON: when it would go.
    let (_, json_out, _) = crate::preview::diff::diff(
        &kubeconfig_path(),
        &[
            "-n",
            &s.ns.name,
            "--config",
            cfg.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    let wait = report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "a")
        .unwrap()["waitsForWindow"]
        .clone();
    let goes_at: Timestamp = wait["goesAt"].as_str().unwrap().parse().unwrap();
    let ahead = goes_at.duration_since(Timestamp::now());
    assert!(
        ahead > SignedDuration::from_hours(21) && ahead < SignedDuration::from_hours(23),
        "{wait}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    s.finish().await;
}

/// What the schema can check is refused at admission, naming the field; an
/// unknown time zone (only the operator knows the database) makes the
/// instance Invalid, naming the field, with an Event.
#[tokio::test]
async fn a_bad_window_is_refused_at_admission_and_an_unknown_zone_is_invalid() {
    let s = Setup::new("window-bad", "  maxUnavailable: 1\n", vec![]).await;
    let refused = |window: serde_json::Value, pause: serde_json::Value| {
        let mut i = with_window("bad", Some(window));
        i["spec"]["account"] = json!(format!("bad-{}", s.ns.name));
        if !pause.is_null() {
            i["spec"]["paused"] = json!(true);
            i["spec"]["pause"] = pause;
        }
        let api = s.instances.clone();
        async move {
            match apply_json(&api, "test", i).await {
                Err(kube::Error::Api(e)) => e.message,
                other => panic!("admitted: {other:?}"),
            }
        }
    };
    let ok = json!({"start": "02:00", "duration": "2h"});
    let msg = refused(json!({"start": "25:00", "duration": "2h"}), json!(null)).await;
    assert!(msg.contains("spec.maintenanceWindow.start"), "{msg}");
    let msg = refused(json!({"start": "02:00", "duration": "200h"}), json!(null)).await;
    assert!(msg.contains("must be from 1m to 168h"), "{msg}");
    let msg = refused(
        json!({"start": "02:00", "duration": "2h", "days": ["Funday"]}),
        json!(null),
    )
    .await;
    assert!(msg.contains("spec.maintenanceWindow.days"), "{msg}");
    let msg = refused(ok.clone(), json!({"until": "tomorrow"})).await;
    assert!(msg.contains("spec.pause.until"), "{msg}");
    // Syntactically a zone, but not in the database: Invalid, naming it.
    let mut i = with_window(
        "mars",
        Some(json!({"start": "02:00", "duration": "2h", "timeZone": "Mars/Olympus_Mons"})),
    );
    i["spec"]["account"] = json!(format!("mars-{}", s.ns.name));
    apply_json(&s.instances, "test", i).await.unwrap();
    let message = wait_for("mars Invalid", T, || async {
        let st = status(&s.instances, "mars").await;
        (st.phase == Some(Phase::Invalid)).then(|| {
            st.conditions
                .iter()
                .find(|c| c.type_ == "Valid")
                .map(|c| c.message.clone())
                .unwrap_or_default()
        })
    })
    .await;
    assert!(
        message.contains("spec.maintenanceWindow.timeZone")
            && message.contains("Mars/Olympus_Mons"),
        "{message}"
    );
    wait_for("the InvalidSpec Event", T, || async {
        s.event_note("InvalidSpec")
            .await
            .filter(|m| m.contains("timeZone"))
    })
    .await;
    s.finish().await;
}

/// Every pause end and window the apiserver admits, the operator honours
/// (a pause until the end of the year 9999 pauses, it is not Invalid; a
/// window of `1h30m` is one); each one it refuses, naming the field, the
/// operator's own validation (for objects that predate the CRD) refuses too.
#[tokio::test]
async fn admission_and_the_operator_agree_on_every_time_and_duration() {
    let rollout = "  maxUnavailable: 1\n";
    let s = Setup::new("window-agree", rollout, vec![]).await;
    let config =
        kura_core::config::OperatorConfig::parse(&window_config(&s.ns.name, "256Mi", rollout))
            .unwrap();
    let paused = |until: &str| json!({"paused": true, "pause": {"by": "ops", "until": until}});
    let window = |start: &str, duration: &str| json!({"maintenanceWindow": {"start": start, "duration": duration, "timeZone": TZ}});
    // (spec fields, the field at fault when refused, whether admission takes it)
    let cases = [
        (paused("9999-12-31T23:59:59Z"), "spec.pause.until", true),
        (
            paused("9999-12-31T23:59:59.999999999+14:00"),
            "spec.pause.until",
            true,
        ),
        (
            paused("9000-01-01T00:00:00.1234567890123Z"),
            "spec.pause.until",
            true,
        ),
        (
            paused("9000-01-01T00:00:00+24:00"),
            "spec.pause.until",
            true,
        ),
        (
            paused("9000-01-01T00:00:00-23:60"),
            "spec.pause.until",
            true,
        ),
        (paused("2016-12-31T23:59:60Z"), "spec.pause.until", false),
        (
            paused("9999-12-31T23:59:59-00:01"),
            "spec.pause.until",
            false,
        ),
        (paused("9000-01-01t00:00:00z"), "spec.pause.until", false),
        (paused("9000-02-29T00:00:00Z"), "spec.pause.until", false),
        (paused("2000-01-01T00:00:00Z"), "spec.pause.until", false),
        (window("02:00", "1h30m"), "", true),
        (window("02:00", "167h60m"), "", true),
        (window("02:00", "10080m"), "", true),
        (
            window("02:00", "5400s"),
            "spec.maintenanceWindow.duration",
            false,
        ),
        (
            window("02:00", "PT1H30M"),
            "spec.maintenanceWindow.duration",
            false,
        ),
        (
            window("02:00", "1h0m"),
            "spec.maintenanceWindow.duration",
            false,
        ),
        (
            window("02:00", "169h"),
            "spec.maintenanceWindow.duration",
            false,
        ),
        (window("+1:05", "1h"), "spec.maintenanceWindow.start", false),
    ];
    let mut admitted = Vec::new();
    for (n, (fields, field, admits)) in cases.iter().enumerate() {
        let name = format!("e{n}");
        let mut i = instance(&name, "registry.example/kura:1.0.0");
        i["spec"]["account"] = json!(format!("{name}-{}", s.ns.name));
        for (k, v) in fields.as_object().unwrap() {
            i["spec"][k] = v.clone();
        }
        let mut typed: KuraInstance = serde_json::from_value(i.clone()).unwrap();
        typed.metadata.namespace = Some(s.ns.name.clone());
        let verdict = kura_core::validate::validate(&typed, &config);
        match apply_json(&s.instances, "test", i).await {
            Ok(_) => {
                assert!(
                    *admits,
                    "admitted, but the apiserver refused it before: {fields}"
                );
                assert!(
                    verdict.is_ok(),
                    "admitted but invalid: {fields}: {verdict:?}"
                );
                admitted.push((name, fields["paused"] == json!(true)));
            }
            Err(kube::Error::Api(e)) => {
                assert!(!admits, "refused at admission: {fields}: {}", e.message);
                assert!(e.message.contains(field), "{fields}: {}", e.message);
                let errs =
                    verdict.expect_err(&format!("refused at admission, valid here: {fields}"));
                assert!(errs.0.iter().any(|e| e.path == *field), "{fields}: {errs}");
            }
            Err(other) => panic!("{fields}: {other}"),
        }
    }
    // The operator's verdict on each admitted one: paused (its end not
    // reached: the year 9000 and later), or Ready with its window.
    for (name, paused) in &admitted {
        let want = if *paused { Phase::Paused } else { Phase::Ready };
        wait_for(&format!("{name} {want:?}"), T, || async {
            let st = status(&s.instances, name).await;
            assert_ne!(
                st.phase,
                Some(Phase::Invalid),
                "{name}: {:?}",
                st.conditions
            );
            (st.phase == Some(want)).then_some(())
        })
        .await;
    }
    s.finish().await;
}
