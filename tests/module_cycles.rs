//! The library's modules import one another without a cycle.
//!
//! Reads each library crate's source (the operator's `src/lib.rs`, the core's
//! `crates/kura-core/src/lib.rs`) down through its `mod` declarations (files and inline modules; `src/main.rs` and `src/bin/` are other
//! crates), and collects every path into the crate: `crate::…`, `super::…` and
//! `self::…` anywhere in code (comments, doc links and string literals aside),
//! `use` trees with their braces, and `use child::…` of a module declared in the
//! same file. A path names the longest module prefix it spells (`crate::reconcile::
//! plan::later` → `reconcile::plan`); an item re-exported by a parent counts as the
//! parent's.
//!
//! The graph's nodes are modules cut to a depth: an edge between a module and one
//! of its ancestors (a child's `use super::…`, a parent's `mod child; pub use
//! child::X`) is the module's own structure, not a layer, and is left out before
//! the cut; edges inside one node after the cut are left out too. Then every
//! strongly connected component of more than one node is a cycle, printed with the
//! import sites of each of its edges.
//!
//! - `top_level_modules_form_no_cycle`: depth 1, every `src/x.rs` or `src/x/` one
//!   node (`reconcile::*` is `reconcile`). The layers: leaves (`api`, `keys`,
//!   `names`, `kind`, `time`, `config`, `validate`, `render`) under the decisions
//!   under the I/O (caches, memory, controllers, `run`, `diff`, `cli`).
//! - `modules_form_no_new_cycle`: every module its own node (a file, or an inline
//!   `mod x { … }`), so siblings such as `reconcile::plan` and `reconcile::status`
//!   are layered too; the cycles not broken yet are listed in [`KNOWN`].
//!
//! - `top_level_modules_form_no_cycle_with_their_tests`: the same, test code
//!   (an item under `#[cfg(test)]`: a `mod tests`, a `use`) included.
//!
//! Between submodules, test code is left out: a table test of `status` may use
//! `plan`'s fixtures.
//!
//! Plain `std`: a tokenizer that knows comments, strings, chars and lifetimes is
//! all the parsing this needs.

// Tests may be longer than the 80 lines a function may have (clippy.toml):
// a scenario reads best in one piece.
#![allow(clippy::too_many_lines)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates read: the operator, and the core crate under it (which cannot
/// import the operator at all: the compiler checks that layer).
const OPERATOR: &str = "src/lib.rs";
const CORE: &str = "crates/kura-core/src/lib.rs";
const BENCH: &str = "crates/kura-bench/src/main.rs";

#[test]
fn top_level_modules_form_no_cycle() {
    check(OPERATOR, Some(1), &[], false);
    check(CORE, Some(1), &[], false);
    check(BENCH, Some(1), &[], false);
}

/// Tests included: a unit test lives beside its module, so what it uses is
/// that module's layer too (a test that needs a module above belongs there).
#[test]
fn top_level_modules_form_no_cycle_with_their_tests() {
    check(OPERATOR, Some(1), &[], true);
    check(CORE, Some(1), &[], true);
    check(BENCH, Some(1), &[], true);
}

/// The cycles between submodules not broken yet, each as the test prints it.
/// A cycle not listed fails the test; so does a listed one that is gone (take
/// it off the list).
const KNOWN: &[&[&str]] = &[
    // The typed manifest and its kinds' types refer to each other; `hash` holds
    // both the canonical JSON writer (used by `writer` and `manifest`) and the
    // hashes of manifests.
    &[
        "render::hash",
        "render::kinds",
        "render::manifest",
        "render::writer",
    ],
];

#[test]
fn modules_form_no_new_cycle() {
    check(OPERATOR, None, &[], false);
    check(CORE, None, KNOWN, false);
}

fn check(root: &str, depth: Option<usize>, known: &[&[&str]], tests: bool) {
    let crate_ = Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join(root), tests);
    assert!(
        crate_.modules.len() > 8 && crate_.uses.len() > 20,
        "the reader found only {} modules and {} paths: it no longer reads this crate",
        crate_.modules.len(),
        crate_.uses.len()
    );
    let graph = crate_.graph(depth);
    let found = strongly_connected(&graph);
    let gone: Vec<&&[&str]> = known
        .iter()
        .filter(|k| !found.iter().any(|c| c == *k))
        .collect();
    assert!(
        gone.is_empty(),
        "these known cycles are gone: take them off the list: {gone:?}"
    );
    let cycles: Vec<&Vec<String>> = found
        .iter()
        .filter(|c| !known.iter().any(|k| c == k))
        .collect();
    if cycles.is_empty() {
        return;
    }
    let mut report = format!(
        "{} import cycle(s) between modules (depth {}):\n",
        cycles.len(),
        depth.map_or("all".to_string(), |d| d.to_string())
    );
    for cycle in cycles {
        report += &format!("\ncycle: {}\n", cycle.join(", "));
        let members: BTreeSet<&String> = cycle.iter().collect();
        for (from, tos) in &graph {
            if !members.contains(from) {
                continue;
            }
            for (to, sites) in tos {
                if !members.contains(to) {
                    continue;
                }
                report += &format!("  {from} -> {to}\n");
                for site in sites.iter().take(4) {
                    report += &format!("      {site}\n");
                }
                if sites.len() > 4 {
                    report += &format!("      … and {} more\n", sites.len() - 4);
                }
            }
        }
    }
    panic!("{report}");
}

/// One module path: `["reconcile", "plan"]`; the crate root is `[]`.
type Module = Vec<String>;

struct Crate {
    /// Every module, with the file it is in.
    modules: BTreeMap<Module, PathBuf>,
    /// Every path into the crate: the module it is written in, the path's
    /// segments resolved from the crate root, and where it is (`file:line`).
    uses: Vec<(Module, Vec<String>, String)>,
    /// Whether test code (`#[cfg(test)]`) is read too.
    tests: bool,
}

impl Crate {
    fn read(root: &Path, tests: bool) -> Crate {
        let mut crate_ = Crate {
            modules: BTreeMap::new(),
            uses: Vec::new(),
            tests,
        };
        crate_.read_file(root, Vec::new(), root.parent().unwrap().to_path_buf());
        crate_
    }

    /// Reads the file of `module`; `dir` is where its child modules' files are.
    fn read_file(&mut self, file: &Path, module: Module, dir: PathBuf) {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = tokenize(&text);
        let shown = file
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(file)
            .display()
            .to_string();
        self.modules.insert(module.clone(), file.to_path_buf());
        let mut files = Vec::new();
        self.read_tokens(&tokens, &shown, module, dir, &mut files);
        for (file, module, dir) in files {
            self.read_file(&file, module, dir);
        }
    }

    /// Reads one module's tokens, its inline modules recursively; the files of
    /// its `mod x;` declarations go to `files`.
    fn read_tokens(
        &mut self,
        tokens: &[Token],
        shown: &str,
        module: Module,
        dir: PathBuf,
        files: &mut Vec<(PathBuf, Module, PathBuf)>,
    ) {
        // The child modules declared here, for `use child::…`.
        let mut children = BTreeSet::new();
        for (i, t) in tokens.iter().enumerate() {
            if t.text == "mod"
                && let Some(name) = tokens.get(i + 1)
                && matches!(tokens.get(i + 2).map(|t| t.text.as_str()), Some(";" | "{"))
            {
                children.insert(name.text.clone());
            }
        }
        let mut i = 0;
        while i < tokens.len() {
            let t = &tokens[i];
            let next = |k: usize| tokens.get(i + k).map_or("", |t| t.text.as_str());
            if !self.tests && matches!(t.text.as_str(), "mod" | "use") && cfg_test(&tokens[..i]) {
                // Test code: skip the module or the `use`.
                let end = (i..tokens.len())
                    .find(|&j| matches!(tokens[j].text.as_str(), ";" | "{"))
                    .unwrap_or(tokens.len());
                i = if tokens.get(end).is_some_and(|t| t.text == "{") {
                    matching_brace(tokens, end) + 1
                } else {
                    end + 1
                };
            } else if t.text == "mod" && is_ident(next(1)) && next(2) == ";" {
                let name = next(1).to_string();
                let mut child = module.clone();
                child.push(name.clone());
                let flat = dir.join(format!("{name}.rs"));
                let (file, child_dir) = if flat.exists() {
                    (flat, dir.join(&name))
                } else {
                    (dir.join(&name).join("mod.rs"), dir.join(&name))
                };
                files.push((file, child, child_dir));
                i += 3;
            } else if t.text == "mod" && is_ident(next(1)) && next(2) == "{" {
                let name = next(1).to_string();
                let end = matching_brace(tokens, i + 2);
                let mut child = module.clone();
                child.push(name.clone());
                self.modules
                    .entry(child.clone())
                    .or_insert_with(|| PathBuf::from(shown));
                self.read_tokens(&tokens[i + 3..end], shown, child, dir.join(&name), files);
                i = end + 1;
            } else if t.text == "use" && (i == 0 || tokens[i - 1].text != "::") {
                let end = (i..tokens.len())
                    .find(|&j| tokens[j].text == ";")
                    .unwrap_or(tokens.len());
                let mut paths = Vec::new();
                use_tree(&tokens[i + 1..end], &[], &mut paths);
                for (path, line) in paths {
                    let first = path.first().map_or("", String::as_str);
                    let resolved = match first {
                        "crate" | "super" | "self" => resolve(&module, &path),
                        _ if children.contains(first) => {
                            let mut full = module.clone();
                            full.extend(path.iter().cloned());
                            Some(full)
                        }
                        _ => None,
                    };
                    if let Some(resolved) = resolved {
                        self.uses
                            .push((module.clone(), resolved, format!("{shown}:{line}")));
                    }
                }
                i = end + 1;
            } else if matches!(t.text.as_str(), "crate" | "super" | "self")
                && next(1) == "::"
                && (i == 0 || tokens[i - 1].text != "::")
            {
                // A path in code: `crate::a::b`, `super::super::f(…)`.
                let mut path = vec![t.text.clone()];
                let mut j = i + 1;
                while j + 1 < tokens.len()
                    && tokens[j].text == "::"
                    && is_ident(&tokens[j + 1].text)
                {
                    path.push(tokens[j + 1].text.clone());
                    j += 2;
                }
                if let Some(resolved) = resolve(&module, &path) {
                    self.uses
                        .push((module.clone(), resolved, format!("{shown}:{}", t.line)));
                }
                i = j;
            } else {
                i += 1;
            }
        }
    }

    /// The dependency graph between modules cut to `depth` (None: every module),
    /// with each edge's sites.
    fn graph(&self, depth: Option<usize>) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
        let cut = |m: &Module| -> String {
            let n = depth.map_or(m.len(), |d| d.min(m.len()));
            if n == 0 {
                "crate".to_string()
            } else {
                m[..n].join("::")
            }
        };
        let mut graph: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for module in self.modules.keys() {
            graph.entry(cut(module)).or_default();
        }
        for (from, path, site) in &self.uses {
            // The longest prefix of the path that is a module.
            let to = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|m| self.modules.contains_key(m))
                .expect("the crate root is a module");
            let related = to.starts_with(from) || from.starts_with(&to);
            if related {
                continue;
            }
            let (from, to) = (cut(from), cut(&to));
            if from != to {
                let sites = graph.entry(from).or_default().entry(to).or_default();
                if !sites.contains(site) {
                    sites.push(site.clone());
                }
            }
        }
        graph
    }
}

/// The path `path` written in `module`, from the crate root; None if it leaves
/// the crate (more `super`s than the module is deep).
fn resolve(module: &Module, path: &[String]) -> Option<Vec<String>> {
    let mut out = module.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            out.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        out.pop()?;
        rest = &rest[1..];
    }
    out.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(out)
}

/// Flattens a `use` tree (the tokens between `use` and `;`) into its paths, each
/// with the line it starts on. `prefix` is the path of the enclosing braces.
fn use_tree(tokens: &[Token], prefix: &[String], out: &mut Vec<(Vec<String>, usize)>) {
    let mut path = prefix.to_vec();
    let mut line = tokens.first().map_or(0, |t| t.line);
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        match t.text.as_str() {
            "::" => {}
            "{" => {
                let end = matching_brace(tokens, i);
                use_tree(&tokens[i + 1..end], &path, out);
                path = prefix.to_vec();
                i = end;
            }
            "," => {
                if path.len() > prefix.len() {
                    out.push((path.clone(), line));
                }
                path = prefix.to_vec();
                line = tokens.get(i + 1).map_or(line, |t| t.line);
            }
            "as" => i += 1, // the alias
            "*" => {}
            s if is_ident(s) => {
                if path.len() == prefix.len() {
                    line = t.line;
                }
                path.push(s.to_string());
            }
            _ => {} // `pub`, attributes' tokens never reach here
        }
        i += 1;
    }
    if path.len() > prefix.len() {
        out.push((path, line));
    }
}

/// Whether the item before whose keyword `before` ends is under `#[cfg(test)]`
/// (its visibility aside).
fn cfg_test(before: &[Token]) -> bool {
    let mut n = before.len();
    if n > 0 && before[n - 1].text == "pub" {
        n -= 1;
    } else if n >= 4 && before[n - 1].text == ")" && before[n - 4].text == "pub" {
        n -= 4; // pub(crate)
    }
    let attr: Vec<&str> = before[n.saturating_sub(7)..n]
        .iter()
        .map(|t| t.text.as_str())
        .collect();
    attr == ["#", "[", "cfg", "(", "test", ")", "]"]
}

fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

struct Token {
    text: String,
    line: usize,
}

/// Identifiers, `::`, braces, and single punctuation characters; comments,
/// string and char literals, lifetimes and numbers dropped.
fn tokenize(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if (ch == 'r' || (ch == 'b' && at(i + 1) == 'r'))
            && {
                let mut j = i + if ch == 'b' { 2 } else { 1 };
                while at(j) == '#' {
                    j += 1;
                }
                at(j) == '"'
            }
            && !is_ident_char(if i == 0 { ' ' } else { c[i - 1] })
        {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                    j += 1 + hashes;
                    break;
                }
                if c[j] == '\n' {
                    line += 1;
                }
                j += 1;
            }
            i = j;
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            let mut j = i + if ch == 'b' { 2 } else { 1 };
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                if at(j) == '\n' {
                    line += 1;
                }
                j += 1;
            }
            i = j + 1;
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            let j = i + if ch == 'b' { 2 } else { 1 };
            if at(j) == '\\' {
                // An escaped char: skip to its closing quote.
                let mut k = j + 1;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
            } else if at(j + 1) == '\'' {
                i = j + 2; // 'x'
            } else {
                // A lifetime or label: drop the quote and its name.
                let mut k = j;
                while is_ident_char(at(k)) {
                    k += 1;
                }
                i = k;
            }
        } else if is_ident_char(ch) {
            let start = i;
            while i < c.len() && is_ident_char(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let word = word.strip_prefix("r#").unwrap_or(&word).to_string();
            if !ch.is_ascii_digit() {
                tokens.push(Token { text: word, line });
            }
        } else if ch == ':' && at(i + 1) == ':' {
            tokens.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}
