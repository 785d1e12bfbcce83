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

use std::cell::RefCell;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ObjectId;

pub fn canonical_json(value: &Value) -> Vec<u8> {
    with_scratch(|bytes| write_canonical(value, bytes), <[u8]>::to_vec)
}

/// The canonical form as a string, e.g. for a configuration file in a ConfigMap.
pub fn canonical_string(value: &Value) -> String {
    String::from_utf8(canonical_json(value)).expect("serde_json writes UTF-8")
}

thread_local! {
    /// Scratch space for canonical bytes, reused by every hash on the thread: the
    /// bytes never outlive a call, and allocating kilobytes anew for each object was
    /// a large share of a render's cost (docs/benchmarks.md).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(16 * 1024));
}

/// Fill the cleared scratch buffer with `write`, then `read` it.
fn with_scratch<T>(write: impl FnOnce(&mut Vec<u8>), read: impl FnOnce(&[u8]) -> T) -> T {
    SCRATCH.with_borrow_mut(|bytes| {
        bytes.clear();
        write(bytes);
        read(bytes)
    })
}

const INFALLIBLE: &str = "writing to a Vec cannot fail";

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            // serde_json's map is sorted; checking keeps the form canonical should
            // a dependency turn on `preserve_order`, without sorting every time.
            if map.keys().is_sorted_by(|a, b| a.as_bytes() <= b.as_bytes()) {
                write_entries(map.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                write_entries(entries.into_iter(), out);
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
        scalar => serde_json::to_writer(out, scalar).expect(INFALLIBLE),
    }
}

fn write_entries<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, k).expect(INFALLIBLE);
        out.push(b':');
        write_canonical(v, out);
    }
}

fn hex(digest: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push(DIGITS[usize::from(b >> 4)] as char);
        hex.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    hex
}

pub fn hex_sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub fn object_hash(body: &Value) -> String {
    with_scratch(|bytes| write_canonical(body, bytes), hex_sha256)
}

pub fn revision<'a>(objects: impl Iterator<Item = (&'a ObjectId, &'a str)>) -> String {
    let mut hasher = Sha256::new();
    for (id, hash) in objects {
        // One line per object: `apiVersion kind namespace/name hash\n`.
        for part in [
            id.api_version.as_str(),
            " ",
            id.kind.as_str(),
            " ",
            id.namespace.as_deref().unwrap_or(""),
            "/",
            id.name.as_str(),
            " ",
            hash,
            "\n",
        ] {
            hasher.update(part.as_bytes());
        }
    }
    hex(&hasher.finalize())
}

/// Hash of the pod-relevant inputs only: the pod template and the configuration
/// the pods mount. A change elsewhere (an ingress class, a PDB) leaves it alone,
/// so it does not roll the pods (INCIDENTS.md #4).
pub fn pod_template_hash(template: &Value, config_map: &Value) -> String {
    let data = config_map.get("data").unwrap_or(&Value::Null);
    let write = |bytes: &mut Vec<u8>| {
        write_canonical(template, bytes);
        bytes.push(b'\n');
        write_canonical(data, bytes);
    };
    let mut hash = with_scratch(write, hex_sha256);
    hash.truncate(16);
    hash
}

/// The short form shown in `kubectl get`.
pub fn short(revision: &str) -> String {
    revision.chars().take(12).collect()
}
