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
//!
//! [`canonical_json`] is the definition, over any JSON value; it is off the hot
//! path (tests, and the manifests' constants once per process). The renderer's
//! typed manifests (`super::manifest`) serialise straight into that form, so
//! [`manifest_hash`] writes them with `super::writer` and never builds a `Value`;
//! the render tests check the two agree for every kind.

use std::cell::RefCell;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::ObjectId;
use super::kinds::PodTemplate;
use super::manifest::{ConfigData, Manifest};

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
            // Sorted here, whatever order the map iterates in (serde_json's
            // `preserve_order` would change it): this is the definition.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
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
        Value::String(s) => write_str(s, out),
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => serde_json::to_writer(out, n).expect(INFALLIBLE),
    }
}

/// A string exactly as serde_json writes it. Nearly every string of a manifest (keys,
/// names, labels) needs no escape and is copied as it is, which is much cheaper than
/// serde_json's byte-by-byte escaper; the few others (an embedded JSON document) go
/// through serde_json itself, so that the escapes stay serde_json's.
pub(super) fn write_str(s: &str, out: &mut Vec<u8>) {
    if needs_escape(s.as_bytes()) {
        serde_json::to_writer(out, s).expect(INFALLIBLE);
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// Whether serde_json escapes any of these bytes: a control character, `"` or `\`.
/// Eight bytes at a time: most strings here are short, where a byte loop (or the
/// byte-wise tail of a vectorised one) costs more than the copy itself.
pub(super) fn needs_escape(bytes: &[u8]) -> bool {
    let n = bytes.len();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    match n {
        0..4 => bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\'),
        // Two overlapping halves cover every byte; a byte seen twice is harmless.
        4..8 => {
            let half =
                |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
            word_needs_escape(u64::from(half(0)) | u64::from(half(n - 4)) << 32)
        }
        // Whole words, then the last eight bytes (overlapping the last whole word).
        _ => (0..n / 8).any(|i| word_needs_escape(word(8 * i))) || word_needs_escape(word(n - 8)),
    }
}

/// Whether any byte of `w` is below 0x20, `"` or `\`, with the classic bit tricks:
/// `(x - 0x01..) & !x & 0x80..` is non-zero exactly when some byte of `x` is zero,
/// and with `0x20..` instead of `0x01..`, when some byte is below 0x20.
fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH_BITS: u64 = ONES * 0x80;
    let below = |x: u64, bound: u8| x.wrapping_sub(ONES * u64::from(bound)) & !x;
    let control = below(w, 0x20);
    let quote = below(w ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(w ^ (ONES * u64::from(b'\\')), 1);
    (control | quote | backslash) & HIGH_BITS != 0
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

/// The canonical bytes of a typed part of a manifest: its types declare their keys
/// in byte order, so their compact JSON (as serde_json writes it) is canonical.
pub fn write_typed(value: &impl Serialize, out: &mut Vec<u8>) {
    super::writer::write_json(value, out).expect("the manifest types serialise to JSON");
}

/// [`object_hash`] of a typed manifest, without building its JSON value.
pub fn manifest_hash(manifest: &Manifest) -> String {
    with_scratch(|bytes| write_typed(manifest, bytes), hex_sha256)
}

pub fn revision<'a>(objects: impl Iterator<Item = (&'a ObjectId, &'a str)>) -> String {
    let mut hasher = Sha256::new();
    for (id, hash) in objects {
        // One line per object: `apiVersion kind namespace/name hash\n`.
        for part in [
            id.kind.api_version(),
            " ",
            id.kind.kind(),
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
/// so it does not roll the pods (docs/incidents.md #4).
pub fn pod_template_hash(template: &PodTemplate, data: &ConfigData) -> String {
    let write = |bytes: &mut Vec<u8>| {
        write_typed(template, bytes);
        bytes.push(b'\n');
        write_typed(data, bytes);
    };
    let mut hash = with_scratch(write, hex_sha256);
    hash.truncate(16);
    hash
}

/// What the spec asks to be rendered: all of it but `paused`, `pause` and
/// `maintenanceWindow`, which say only *when* (a hash of its canonical JSON).
/// A change of it is the user's; an edit of a window or a pause is not, so it
/// never lets a change of the operator's skip the window it waits for.
pub fn spec_hash(spec: &crate::api::KuraInstanceSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        for when in ["paused", "pause", "maintenanceWindow"] {
            map.remove(when);
        }
    }
    let hash = hex_sha256(&canonical_json(&value));
    hash[..16].to_string()
}

/// The short form shown in `kubectl get`.
pub fn short(revision: &str) -> String {
    revision.chars().take(12).collect()
}
