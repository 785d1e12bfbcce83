//! docs/architecture.md names files, directories and modules; every one of
//! them must exist, so that a rename or a move that leaves the page behind
//! fails here instead of misleading the next maintainer.
//!
//! Two checks, both of the page as written (no Markdown parser: the page is
//! plain text with backticks):
//!
//! - `named_paths_exist`: every path-like word of the page, code blocks
//!   included. A word that starts with a top-level directory of the
//!   repository (`src/…`, `tests/…`, `crates/…`, `hack/…`) is taken from the
//!   repository's root; another with a `/` that ends in a file extension or a
//!   `/` (`reconcile/decide.rs`, `render/`) from one of [`ROOTS`], the places
//!   the page writes paths relative to; a bare file name (`fence.rs`) anywhere
//!   in the repository. `tests/*.rs` is a directory with such files.
//! - `named_modules_exist`: every `a::b::c` in backticks outside code blocks.
//!   Leading modules must be files or directories of `src/` or of
//!   `crates/kura-core/src/` (the operator re-exports the core's modules
//!   under their own names), and the first segment that is not a module (a
//!   function, a type, a constant) must appear in that module's source. A
//!   path that starts with a type (`ChildKind::wave`) names a type defined in
//!   the workspace and one of its members.
//!
//! Plain `std`, like the other structure tests.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

const DOC: &str = "docs/architecture.md";

/// Where a relative path of the page may start: the operator's modules are
/// named relative to `src/`, the core's to its `src/`, the cluster tests to
/// `tests/cluster/`, the chart's files to the chart, other pages to `docs/`.
const ROOTS: [&str; 6] = [
    "",
    "src",
    "crates/kura-core/src",
    "tests/cluster",
    "charts/kura-operator",
    "docs",
];

/// The module trees a `a::b` path may start in: the operator's, then the
/// core's (whose modules the operator re-exports under the same names).
const OPERATOR: &str = "src";
const CORE: &str = "crates/kura-core/src";

/// The endings that make a word with a `/` (or a bare word) a file name.
const EXTENSIONS: [&str; 9] = [
    ".rs", ".sh", ".yaml", ".yml", ".tpl", ".json", ".md", ".toml", ".py",
];

/// Crates and types from outside the workspace the page may name.
const EXTERNAL_CRATES: [&str; 8] = [
    "std", "tokio", "kube", "futures", "serde", "jiff", "tower", "http",
];
const EXTERNAL_TYPES: [&str; 2] = ["Timestamp", "Recorder"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    fs::read_to_string(repo().join(DOC)).unwrap_or_else(|e| panic!("{DOC}: {e}"))
}

/// Every file of the repository, relative to its root: not the build's
/// output, not hidden directories (the VCS, the local control plane).
fn repo_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo(), &mut out);
    out.into_iter()
        .map(|p| p.strip_prefix(repo()).unwrap().to_path_buf())
        .collect()
}

/// The repository's top-level directories (`src`, `tests`, `crates`, …).
fn top_level_dirs() -> BTreeSet<String> {
    fs::read_dir(repo())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect()
}

/// The page's words, split at anything that cannot be part of a path or a
/// module path (spaces, backticks, brackets, commas, quotes, box drawing).
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-./*<>{}:=".contains(c)))
        .map(|w| w.trim_end_matches(['.', ':']))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The page without its fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn has_extension(word: &str) -> bool {
    EXTENSIONS.iter().any(|e| word.ends_with(e))
}

/// Whether `path` (relative to the root, with at most one `*` in its last
/// segment) names something that exists.
fn exists(path: &str) -> bool {
    let Some((dir, pattern)) = path.rsplit_once('/').filter(|(_, last)| last.contains('*')) else {
        return repo().join(path).exists();
    };
    let (before, after) = pattern.split_once('*').unwrap();
    fs::read_dir(repo().join(dir)).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(before) && name.ends_with(after)
        })
    })
}

/// The paths the page names that do not exist, each with why.
fn missing_paths(text: &str) -> Vec<String> {
    let tops = top_level_dirs();
    let files = repo_files();
    let mut missing = Vec::new();
    for word in words(text) {
        let w = word.as_str();
        // Absolute paths, URLs, module paths, placeholders and brace lists
        // are not paths of this repository.
        if w.starts_with('/')
            || w.contains("://")
            || w.contains("::")
            || w.contains(['<', '>', '{', '}', '='])
        {
            continue;
        }
        match w.split_once('/') {
            // An API group or label prefix (`kura.dev/adopt`, `kura.dev/`).
            Some((first, _)) if first.contains('.') => {}
            Some((first, _)) if tops.contains(first) && !exists(w) => {
                missing.push(format!("{w}: not in the repository"));
            }
            Some((first, _)) if tops.contains(first) => {}
            Some(_) if has_extension(w) || w.ends_with('/') => {
                let under = |root: &&str| match *root {
                    "" => exists(w),
                    root => exists(&format!("{root}/{w}")),
                };
                if !ROOTS.iter().any(under) {
                    missing.push(format!("{w}: under none of {ROOTS:?}"));
                }
            }
            Some(_) => {}
            None if has_extension(w)
                && !files.iter().any(|f| f.file_name().is_some_and(|n| n == w)) =>
            {
                missing.push(format!("{w}: no file of that name in the repository"));
            }
            None => {}
        }
    }
    missing
}

/// Every `.rs` file of the workspace's sources, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    repo_files()
        .into_iter()
        .filter(|p| p.starts_with("src") || p.starts_with("crates"))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| Some((p.clone(), fs::read_to_string(repo().join(&p)).ok()?)))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `text` holds `word` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The `.rs` files of a module: its own file and everything under its
/// directory, if it has one.
fn module_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = dir.join(format!("{name}.rs"));
    if file.is_file() {
        out.push(file);
    }
    let mut stack = vec![dir.join(name)];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// How far `segments` go as modules under `base`, and the files of the last
/// module reached.
fn resolve(base: &str, segments: &[&str]) -> (usize, Vec<PathBuf>) {
    let mut dir = repo().join(base);
    let mut files = Vec::new();
    let mut depth = 0;
    for seg in segments {
        let is_module = seg.starts_with(|c: char| c.is_ascii_lowercase())
            && (dir.join(format!("{seg}.rs")).is_file() || dir.join(seg).is_dir());
        if !is_module {
            break;
        }
        files = module_files(&dir, seg);
        dir = dir.join(seg);
        depth += 1;
    }
    (depth, files)
}

fn any_file_has(files: &[PathBuf], word: &str) -> bool {
    files
        .iter()
        .any(|f| fs::read_to_string(f).is_ok_and(|text| has_word(&text, word)))
}

/// Why the module path `path` does not resolve, if it does not.
fn unresolved(path: &str, sources: &[(PathBuf, String)]) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (first, rest) = segments.split_first()?;
    if EXTERNAL_CRATES.contains(first) || EXTERNAL_TYPES.contains(first) {
        return None;
    }
    if first.starts_with(|c: char| c.is_ascii_uppercase()) {
        // A type and one of its members: the files that define or implement
        // the type must name the member.
        let defining: Vec<PathBuf> = sources
            .iter()
            .filter(|(_, text)| {
                ["struct", "enum", "trait", "type"]
                    .iter()
                    .any(|kw| has_word(text, &format!("{kw} {first}")))
                    || text
                        .lines()
                        .any(|l| l.trim_start().starts_with("impl") && has_word(l, first))
            })
            .map(|(p, _)| repo().join(p))
            .collect();
        if defining.is_empty() {
            return Some(format!("no type `{first}` is defined in src/ or crates/"));
        }
        return match rest.first() {
            Some(member) if !any_file_has(&defining, member) => Some(format!(
                "`{member}` is not in the files that define `{first}`"
            )),
            _ => None,
        };
    }
    let (bases, segments): (&[&str], &[&str]) = match *first {
        "kura_core" => (&[CORE], rest),
        "kura_operator" | "crate" => (&[OPERATOR, CORE], rest),
        _ => (&[OPERATOR, CORE], &segments[..]),
    };
    if segments.is_empty() {
        return None;
    }
    let (depth, files) = bases
        .iter()
        .map(|base| resolve(base, segments))
        .max_by_key(|(depth, _)| *depth)
        .unwrap();
    if depth == 0 {
        return Some(format!(
            "no module `{}` in {}",
            segments[0],
            bases.join("/ or ") + "/"
        ));
    }
    match segments.get(depth) {
        Some(item) if !any_file_has(&files, item) => Some(format!(
            "`{item}` is not in the module `{}`",
            segments[..depth].join("::")
        )),
        _ => None,
    }
}

/// The module paths in backticks outside code blocks, cut where a call or
/// anything else that is not a path begins (`plan::plan(observed, …)`).
fn module_paths(text: &str) -> BTreeSet<String> {
    prose(text)
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|code| {
            let code = code.trim();
            let end = code
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(code.len());
            code[..end].trim_end_matches(':').to_string()
        })
        .filter(|p| p.contains("::"))
        .collect()
}

#[test]
fn named_paths_exist() {
    let text = doc();
    let missing = missing_paths(&text);
    assert!(
        missing.is_empty(),
        "{DOC} names paths that do not exist (rename them in the page too):\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn named_modules_exist() {
    let text = doc();
    let sources = sources();
    let paths = module_paths(&text);
    assert!(
        paths.len() > 50,
        "found only {} module paths in {DOC}: the reader no longer reads the page",
        paths.len()
    );
    let unresolved: Vec<String> = paths
        .iter()
        .filter_map(|p| unresolved(p, &sources).map(|why| format!("`{p}`: {why}")))
        .collect();
    assert!(
        unresolved.is_empty(),
        "{DOC} names modules or items that do not exist:\n  {}",
        unresolved.join("\n  ")
    );
}

/// The readers above catch what they are meant to: a renamed file, a
/// module path whose function moved.
#[test]
fn the_checks_find_what_is_gone() {
    let page = "See `src/reconcile/decdie.rs`, reconcile/nothing.rs, `fence.rs` and `tests/*.rs`.";
    let missing = missing_paths(page);
    assert_eq!(
        missing.len(),
        2,
        "expected the two bogus paths, got {missing:?}"
    );
    let sources = sources();
    for bogus in [
        "reconcile::no_such_function",
        "no_such_module::x",
        "kura_core::plan::no_such_item",
        "ChildKind::no_such_member",
        "NoSuchType::x",
    ] {
        assert!(unresolved(bogus, &sources).is_some(), "`{bogus}` resolved");
    }
    for real in [
        "reconcile::execute::execute",
        "kura_core::gateway::pods::compact",
        "claims::index::Index::grants",
        "kura_core::api",
        "Accepted::fleet_revision",
    ] {
        assert_eq!(unresolved(real, &sources), None, "`{real}`");
    }
}
