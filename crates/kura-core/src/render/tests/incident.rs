//! docs/incidents.md #1, the founding incident, as a pure test: a renderer change moved
//! bare-metal regions from a dedicated gateway to the shared ingress class, the image
//! stayed the same, and nothing noticed. Here the same move is a configuration change
//! (the region becomes `host`), and the revision must notice it.

use super::*;
use crate::config::NetworkMode;

fn ingress_classes(desired: &Desired) -> Vec<&str> {
    find(desired, "Ingress")
        .iter()
        .map(|o| {
            o.manifest
                .ingress_spec()
                .unwrap()
                .ingress_class_name
                .as_str()
        })
        .collect()
}

#[test]
fn founding_incident_auto_instance_moving_from_cloud_to_host_region_changes_revision_class_and_drops_gateway()
 {
    // The same instance: gateway Auto, same image, before and after.
    let instance = example("acme-eu");
    assert_eq!(instance.spec.gateway.mode, GatewayMode::Auto);
    let cloud = config();
    assert_eq!(cloud.regions["eu-west-1"].network, NetworkMode::Cloud);
    let mut host = cloud.clone();
    host.regions.get_mut("eu-west-1").unwrap().network = NetworkMode::Host;

    let before = render_with(&instance, &cloud);
    let after = render_with(&instance, &host);

    // Image equality is exactly the check that let the incident through.
    assert_eq!(before.image, after.image);
    assert_ne!(
        before.revision, after.revision,
        "the move must change the revision"
    );

    assert_eq!(
        ingress_classes(&before),
        ["kura-gw.kura-demo.gw-acme-eu-west-1-b48d34c4"]
    );
    assert_eq!(ingress_classes(&after), ["kura-shared"]);

    assert_eq!(find(&before, "KuraGateway").len(), 1);
    assert!(
        find(&after, "KuraGateway").is_empty(),
        "the dedicated gateway must leave the set"
    );
    // Everything else is still there: pruning removes exactly the gateway.
    let ids = |d: &Desired| -> Vec<ObjectId> { d.objects.iter().map(|o| o.id.clone()).collect() };
    let mut expected = ids(&before);
    expected.retain(|id| id.kind != crate::kind::ChildKind::KuraGateway);
    assert_eq!(ids(&after), expected);

    // An ingress class is nothing a pod cares about: the pods must not roll (docs/incidents.md #4).
    assert_eq!(before.pod_template_hash, after.pod_template_hash);
}

/// A dedicated gateway of a configuration with `gateway.hostPorts` binds
/// :80/:443 on its node (its container's 8080/8443), so the scheduler places
/// it only where those ports are free: on a single bare-metal node with an
/// ingress controller of its own, never (the founding incident's gateway).
/// Without the setting nothing changes: no hostPort, the same spec rendered
/// for the instance (the golden revisions hold that).
#[test]
fn a_gateway_with_host_ports_binds_80_and_443_on_its_node() {
    let mut config = config();
    config.gateway.host_ports = true;
    let desired = render_with(&example("acme-eu"), &config);
    let gateway = find(&desired, "KuraGateway")[0].body();
    assert_eq!(gateway["spec"]["hostPorts"], true);
    let mut gw = example_gateway();
    gw.spec.host_ports = true;
    let rendered = crate::render::gateway::render_gateway(&gw, &Default::default());
    let deployment = rendered
        .objects
        .iter()
        .find(|o| o.id.kind == crate::kind::ChildKind::Deployment)
        .unwrap()
        .body();
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    let bound: Vec<(i64, i64)> = ports
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["hostPort"].as_i64().unwrap(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(bound, [(80, 8080), (443, 8443)]);
    let without = render_with(&example("acme-eu"), &super::config());
    assert!(
        find(&without, "KuraGateway")[0].body()["spec"]
            .get("hostPorts")
            .is_none()
    );
}
