//! The revision: a content hash of the rendered manifests.
//!
//! Canonical form (pinned by golden vectors in the tests):
//! - an object's canonical bytes are its JSON with object keys sorted by byte
//!   order, no insignificant whitespace, strings escaped as serde_json escapes
//!   them, and numbers as serde_json prints them; it is taken *before* the
//!   `kura.dev/revision` annotation is stamped in;
//! - an object's hash is the lower-case hex sha256 of its canonical bytes;
//! - the revision is the hex sha256 of one line per object, in the order of
//!   (apiVersion, kind, namespace, name): `apiVersion kind namespace/name hash\n`
//!   (a cluster-scoped object has an empty namespace).
//!
//! Any change in rendered output therefore changes the revision; nothing else does.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ObjectId;

pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            // serde_json's map is already sorted; sorting again keeps the form
            // canonical even if a dependency turns on `preserve_order`.
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, k).expect("writing to a Vec cannot fail");
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("writing to a Vec cannot fail"),
    }
}

pub fn hex_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push(char::from_digit((b >> 4) as u32, 16).unwrap());
        hex.push(char::from_digit((b & 0xf) as u32, 16).unwrap());
    }
    hex
}

pub fn object_hash(body: &Value) -> String {
    hex_sha256(&canonical_json(body))
}

pub fn revision<'a>(objects: impl Iterator<Item = (&'a ObjectId, &'a str)>) -> String {
    let mut hasher = Sha256::new();
    for (id, hash) in objects {
        let line = format!(
            "{} {} {}/{} {}\n",
            id.api_version,
            id.kind,
            id.namespace.as_deref().unwrap_or(""),
            id.name,
            hash
        );
        hasher.update(line.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Hash of the pod-relevant inputs only: the pod template and the configuration
/// the pods mount. A change elsewhere (an ingress class, a PDB) leaves it alone,
/// so it does not roll the pods (INCIDENTS.md #4).
pub fn pod_template_hash(template: &Value, config_map: &Value) -> String {
    let mut bytes = canonical_json(template);
    bytes.push(b'\n');
    bytes.extend(canonical_json(
        config_map.get("data").unwrap_or(&Value::Null),
    ));
    hex_sha256(&bytes)[..16].to_string()
}

/// The short form shown in `kubectl get`.
pub fn short(revision: &str) -> String {
    revision.chars().take(12).collect()
}
