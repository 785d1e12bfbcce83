//! Golden vectors: the revision of every example instance, and the canonical form
//! the revision is built from (documented in render/hash.rs).
//!
//! A change to any value here means the rendered output changed, and every deployed
//! instance will get a new desired revision and be re-applied when the operator is
//! upgraded. That may be intended (then update the vectors, and say so in the change
//! description), but it must never happen by accident.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::*;
use crate::kind::ChildKind;

/// (instance, revision, pod template hash) under examples/config.yaml.
/// acme-eu and globex-eu changed on purpose when examples/config.yaml's gateway
/// moved from ingress-nginx (retired upstream) to Traefik (image and
/// controller of their dedicated KuraGateway); their pod templates did not.
const GOLDEN: [(&str, &str, &str); 3] = [
    (
        "acme-eu",
        "a729cba30a73f3c4ae7ca5ee8e2aa7e23ae2675d1897c0bdef2e1ea6c09908f8",
        "ff562e26d6d73ee3",
    ),
    (
        "globex-eu",
        "d3b0f3e3cf13152a528264842cd5373efaa011270d606faae7424e623f92c493",
        "473101049342bbed",
    ),
    (
        "initech-fra",
        "c0ba0dc9de3b589bca0f18d5908d083e7f187ae98637600c2d7c165a4e28972b",
        "218a6b1174cacda2",
    ),
];

/// The gateway renderer's revision for `example_gateway()`: its children carry it.
/// Changed on purpose when the class began to carry the gateway's uid and
/// namespace (and its name to be derived from them): every gateway's children
/// are re-applied once on upgrade; the pod template is unchanged, so no
/// gateway pod restarts. Changed again when the gateway's controller became
/// Traefik (its command line): every gateway's pods restart once on upgrade,
/// and a gateway still configured with ingress-nginx's image would not start
/// (its flags are Traefik's): move `gateway.image` first. Changed again when
/// the controller got a ServiceAccount of its own and its two bindings: every
/// gateway's pods restart once on upgrade (`serviceAccountName` in the pod
/// template), now with the rights Traefik needs.
const GOLDEN_GATEWAY: &str = "e87575cd6ab5d6655dd073539ae438224a78ff6c8d4182a9448f8be2edb9d24d";

#[test]
fn the_example_gateway_renders_its_pinned_revision() {
    let desired = crate::render::gateway::render_gateway(&example_gateway(), &Default::default());
    assert_eq!(
        desired.revision, GOLDEN_GATEWAY,
        "the rendered output changed: see the module comment"
    );
}

#[test]
fn example_instances_render_their_pinned_revisions() {
    let rendered: Vec<(String, String, String)> = examples()
        .iter()
        .map(|i| {
            let d = render_with(i, &config());
            (
                i.metadata.name.clone().unwrap(),
                d.revision,
                d.pod_template_hash,
            )
        })
        .collect();
    let golden: Vec<(String, String, String)> = GOLDEN
        .iter()
        .map(|(n, r, p)| (n.to_string(), r.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        rendered, golden,
        "the rendered output changed: see the module comment"
    );
}

#[test]
fn canonical_json_sorts_keys_and_drops_whitespace() {
    let value = json!({ "b": 1, "a": [true, null, "x\"y"], "c": { "z": 1.5, "y": -2 } });
    let canonical = String::from_utf8(canonical_json(&value)).unwrap();
    assert_eq!(
        canonical,
        r#"{"a":[true,null,"x\"y"],"b":1,"c":{"y":-2,"z":1.5}}"#
    );
}

/// The canonical writer copies strings that need no escape itself; whatever it
/// copies or escapes must read exactly as serde_json writes it.
#[test]
fn canonical_strings_are_escaped_exactly_as_serde_json_escapes_them() {
    let every_ascii_byte: String = (0u8..=0x7f).map(char::from).collect();
    for s in [
        "",
        "plain-name",
        "x\"y",
        "back\\slash",
        "tab\tand\nnewline",
        "\u{1}\u{1f}\u{7f}",
        "ünïcödé ✓",
        &every_ascii_byte,
    ] {
        let value = json!({ s: s });
        let expected = serde_json::to_vec(&value).unwrap();
        assert_eq!(canonical_json(&value), expected, "{s:?}");
    }
}

/// The word-at-a-time escape check against the byte-by-byte rule, for every byte
/// value at every position of short and longer strings, amid bytes next to the
/// escaped ones (where the bit tricks could go wrong).
#[test]
fn the_escape_check_agrees_with_the_byte_rule() {
    let rule = |bytes: &[u8]| bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    for background in [b'a', b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xff] {
        for len in 0..=20 {
            let mut bytes = vec![background; len];
            assert_eq!(hash::needs_escape(&bytes), rule(&bytes), "{bytes:?}");
            for at in 0..len {
                for b in 0..=u8::MAX {
                    bytes[at] = b;
                    assert_eq!(hash::needs_escape(&bytes), rule(&bytes), "{bytes:?}");
                }
                bytes[at] = background;
            }
        }
    }
}

#[test]
fn an_object_hash_is_the_hex_sha256_of_its_canonical_json() {
    let value = json!({ "kind": "ConfigMap", "apiVersion": "v1" });
    let expected = format!(
        "{:x}",
        Sha256::digest(br#"{"apiVersion":"v1","kind":"ConfigMap"}"#)
    );
    assert_eq!(hash::object_hash(&value), expected);
}

#[test]
fn the_revision_hashes_one_line_per_object_with_empty_namespace_for_cluster_scope() {
    let id = |kind: ChildKind, namespace: Option<&str>| ObjectId {
        kind,
        namespace: namespace.map(String::from),
        name: "n".into(),
    };
    let (a, b) = (
        id(ChildKind::ConfigMap, Some("ns")),
        id(ChildKind::IngressClass, None),
    );
    let revision = hash::revision([(&a, "h1"), (&b, "h2")].into_iter());
    let expected = format!(
        "{:x}",
        Sha256::digest(b"v1 ConfigMap ns/n h1\nnetworking.k8s.io/v1 IngressClass /n h2\n")
    );
    assert_eq!(revision, expected);
}
