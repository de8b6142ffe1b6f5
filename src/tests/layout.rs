//! The crate's shape, checked: every `crate::` and `super::` path in `src/`
//! (in `use` trees, nested groups included, and anywhere in the code) goes to
//! the file's own top-level module or to a lower layer of the list in
//! `src/lib.rs` ("# Layout"), so the module graph has no cycle and no upward
//! arrow; the files of one module use each other without a circle; no
//! function outside the tests is longer than 80 lines, and no file longer
//! than 700.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest function body allowed outside the tests, in lines.
const MAX_FN_LINES: usize = 80;
/// Longest file allowed outside the tests (its test module aside), in lines.
const MAX_FILE_LINES: usize = 700;

/// Layer of each top-level module, read from the lib.rs doc list.
fn layers() -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string("src/lib.rs").unwrap();
    let section = lib
        .split("//! # Layout")
        .nth(1)
        .expect("src/lib.rs has a \"# Layout\" section");
    let mut out = BTreeMap::new();
    for line in section.lines().map(|l| l.trim_start_matches("//!").trim()) {
        let Some((number, rest)) = line.split_once(". ") else {
            continue;
        };
        let Ok(layer) = number.parse::<usize>() else {
            continue;
        };
        let names = rest.split("`:").next().unwrap();
        for name in names.split('`').skip(1).step_by(2) {
            assert!(
                out.insert(name.to_string(), layer).is_none(),
                "{name} is listed twice in the layout"
            );
        }
    }
    assert!(out.len() > 5, "the layout lists the modules: {out:?}");
    out
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().unwrap() != "tests" {
                source_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A library file (not the binary, the tests or the benchmark): its module
/// path (`src/engine/traffic.rs` is `["engine", "traffic"]`) and its text
/// up to its `#[cfg(test)] mod …` block.
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    code: String,
}

impl SourceFile {
    /// The top-level module the file belongs to.
    fn top(&self) -> &str {
        &self.module[0]
    }
}

/// A file's module path from its place under `src/`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code before the file's test module (a `#[cfg(test)]` on any other
/// item does not end it).
fn without_tests(text: &str) -> &str {
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]") {
        let at = from + at;
        let next = text[at + "#[cfg(test)]".len()..].trim_start();
        if next.starts_with("mod ") || next.starts_with("pub mod ") {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

fn library_files() -> Vec<SourceFile> {
    let mut files = Vec::new();
    source_files(Path::new("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let module = module_path(path.strip_prefix("src").unwrap());
            if ["lib", "main", "bench", "bench_queue", "bench_table"].contains(&module[0].as_str())
            {
                return None;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = without_tests(&text).to_string();
            Some(SourceFile { path, module, code })
        })
        .collect()
}

/// The first name of each branch of the use tree (or path) at the start of
/// `rest`: `a::b` gives `a`, `{a::{b, c}, d}` gives `a` and `d`.
fn tree_heads(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    // Split the group at its own commas, not at those of nested groups.
    let (mut depth, mut item_start, mut heads) = (0usize, 0usize, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(ident(&group[item_start..i]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(ident(&group[item_start..i]));
                item_start = i + 1;
            }
            _ => {}
        }
    }
    heads
}

/// The top-level modules that code in `module` names through `crate::` or
/// `super::` paths (in `use` trees, nested groups included, and in
/// expressions and signatures anywhere in the code), resolved: `super::x`
/// in `engine` (`src/engine/mod.rs`) is `crate::x`; in `engine::traffic`
/// it is `engine::x`, the module's own.
fn crate_paths(module: &[String], code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in ["crate::", "super::"] {
        for (i, _) in code.match_indices(prefix) {
            let before = &code[..i];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                || before.ends_with("super::")
            {
                continue; // `noisylab_crate::`, or inside a run of `super::`
            }
            let mut rest = &code[i..];
            let mut depth = module.len();
            if prefix == "crate::" {
                rest = &rest["crate::".len()..];
                depth = 0;
            } else {
                while let Some(r) = rest.strip_prefix("super::") {
                    rest = r;
                    depth = depth.saturating_sub(1);
                }
            }
            let heads: Vec<String> = if depth == 0 {
                tree_heads(rest)
            } else {
                vec![module[0].clone()] // still inside the file's own top-level module
            };
            out.extend(heads.into_iter().filter(|h| !h.is_empty()));
        }
    }
    out
}

#[test]
fn every_module_is_in_the_layout() {
    let layers = layers();
    let lib = std::fs::read_to_string("src/lib.rs").unwrap();
    for line in lib.lines() {
        if let Some(name) = line.strip_prefix("pub mod ") {
            let name = name.trim_end_matches(';');
            assert!(
                layers.contains_key(name),
                "src/lib.rs: module `{name}` is not in the \"# Layout\" list; give it a layer"
            );
        }
    }
}

#[test]
fn modules_use_only_the_layers_below_their_own() {
    let layers = layers();
    let mut wrong = Vec::new();
    for file in library_files() {
        let (path, module) = (&file.path, file.top());
        let own = layers[module];
        for target in crate_paths(&file.module, &file.code) {
            if target == module {
                continue;
            }
            match layers.get(&target) {
                Some(&layer) if layer < own => {}
                Some(&layer) => wrong.push(format!(
                    "{}: `crate::{target}` (layer {layer}) from `{module}` (layer {own})",
                    path.display()
                )),
                None => wrong.push(format!(
                    "{}: `crate::{target}` is not a module of the layout",
                    path.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "uses of a layer not below the user's own:\n{}",
        wrong.join("\n")
    );
}

/// `(first line, lines)` of every function of `code` with a body of its own.
fn functions(code: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let words: Vec<&str> = trimmed.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let qualifiers = [
            "pub",
            "pub(crate)",
            "pub(super)",
            "const",
            "async",
            "unsafe",
        ];
        if !words[..at].iter().all(|w| qualifiers.contains(w)) {
            continue;
        }
        // The signature ends at the first line with `{` or `;`.
        let Some(open) =
            (i..lines.len()).find(|&j| lines[j].contains('{') || lines[j].ends_with(';'))
        else {
            continue;
        };
        if !lines[open].contains('{') || lines[open].trim_end().ends_with('}') {
            continue; // a declaration, or a one-line body
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            out.push((i + 1, end - i + 1));
        }
    }
    out
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let mut long = Vec::new();
    for file in library_files() {
        let path = &file.path;
        for (line, len) in functions(&file.code) {
            if len > MAX_FN_LINES {
                long.push(format!("{}:{line}: {len} lines", path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_file_is_longer_than_700_lines() {
    let long: Vec<String> = library_files()
        .iter()
        .map(|f| (f, f.code.lines().count()))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .map(|(f, n)| format!("{}: {n} lines", f.path.display()))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (tests aside): split them by their jobs:\n{}",
        long.join("\n")
    );
}

/// The sibling files (`backend/clients.rs` → `coordinator`) that a file
/// directly inside a top-level module names through `super::x` or
/// `crate::top::x`.
fn sibling_uses(file: &SourceFile, siblings: &[String]) -> Vec<String> {
    let top = file.top();
    let mut out = Vec::new();
    let own = format!("crate::{top}::");
    for prefix in ["super::", own.as_str()] {
        for (i, _) in file.code.match_indices(prefix) {
            let before = &file.code[..i];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest = &file.code[i + prefix.len()..];
            if rest.starts_with("super::") {
                continue;
            }
            for head in tree_heads(rest) {
                if siblings.contains(&head) && head != file.module[1] && !out.contains(&head) {
                    out.push(head);
                }
            }
        }
    }
    out
}

/// A circle in `edges` (name → names it uses), if there is one.
fn circle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.iter().any(|d| d == node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.push(node.to_string());
        None
    }
    let mut done = Vec::new();
    edges
        .keys()
        .find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

/// Each top-level module's files (its `mod.rs` aside: it declares them)
/// and the siblings each one uses.
fn sibling_graphs() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let files = library_files();
    let mut graphs: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in files.iter().filter(|f| f.module.len() >= 2) {
        let siblings: Vec<String> = files
            .iter()
            .filter(|f| f.module.len() >= 2 && f.top() == file.top())
            .map(|f| f.module[1].clone())
            .collect();
        if file.module.len() == 2 {
            graphs
                .entry(file.top().to_string())
                .or_default()
                .insert(file.module[1].clone(), sibling_uses(file, &siblings));
        }
    }
    graphs
}

#[test]
fn the_files_of_a_module_use_each_other_without_a_circle() {
    let graphs = sibling_graphs();
    assert!(
        graphs["backend"]["coordinator"].contains(&"clients".to_string()),
        "the graph sees a file's uses of its siblings: {:?}",
        graphs["backend"]
    );
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(top, edges)| circle(edges).map(|c| format!("{top}: {}", c.join(" → "))))
        .collect();
    assert!(
        circles.is_empty(),
        "files that use each other in a circle (move what both need to a third, lower file):\n{}",
        circles.join("\n")
    );
    let with_one: BTreeMap<String, Vec<String>> = [
        ("a".to_string(), vec!["b".to_string()]),
        ("b".to_string(), vec!["c".to_string()]),
        ("c".to_string(), vec!["a".to_string()]),
    ]
    .into();
    assert_eq!(circle(&with_one).unwrap(), ["a", "b", "c", "a"]);
}

#[test]
fn the_checks_see_what_they_check() {
    // The parsers above find what they are meant to, so the tests cannot
    // pass by finding nothing.
    let engine = ["engine".to_string()];
    let traffic = ["engine".to_string(), "traffic".to_string()];
    assert_eq!(
        crate_paths(
            &engine,
            "use crate::a::b;\nuse crate::{c, d::e};\nx = crate::f(1);"
        ),
        ["a", "c", "d", "f"]
    );
    // The blind spots of the first version of this checker, each seen now:
    // a `super::` path from a `mod.rs` (the crate root's child) …
    assert_eq!(
        crate_paths(&engine, "use super::report::Exporter as _;"),
        ["report"]
    );
    // … one inside a function body, a group behind `super::`, and a
    // `super::super::` from a file two levels down …
    assert_eq!(
        crate_paths(
            &engine,
            "fn f() {\n    let x = super::report::json::render(&r);\n}"
        ),
        ["report"]
    );
    assert_eq!(
        crate_paths(&engine, "use super::{report::X, sched};"),
        ["report", "sched"]
    );
    assert_eq!(
        crate_paths(&traffic, "use super::super::cli::Opts;"),
        ["cli"]
    );
    // … a nested group, whose first `}` is not the group's end …
    assert_eq!(
        crate_paths(&engine, "use crate::{sched::{JobId}, report::Exporter};"),
        ["sched", "report"]
    );
    assert_eq!(
        crate_paths(&engine, "use crate::{a::{b, c::{d}}, e, f::g};"),
        ["a", "e", "f"]
    );
    // … while a sibling inside the same top-level module is the module's own.
    assert_eq!(
        crate_paths(&traffic, "use super::limiter::Bucket;"),
        ["engine"]
    );
    // A `#[cfg(test)]` on a single item does not hide the rest of the file.
    assert!(
        without_tests("#[cfg(test)]\nfn helper() {}\nuse crate::cli;\n#[cfg(test)]\nmod tests {}")
            .contains("crate::cli")
    );
    assert_eq!(module_path(Path::new("engine/traffic.rs")), traffic);
    assert_eq!(module_path(Path::new("engine/mod.rs")), engine);
    let long_fn = format!("fn f() {{\n{}}}\nfn g() {{ 1 }}\n", "    x;\n".repeat(90));
    assert_eq!(functions(&long_fn), [(1, 92)]);
    let files = library_files();
    assert!(files.iter().any(|f| f.top() == "engine"));
    let total: usize = files.iter().map(|f| functions(&f.code).len()).sum();
    assert!(total > 100, "found only {total} functions");
    let supers: usize = files
        .iter()
        .map(|f| f.code.matches("super::").count())
        .sum();
    assert!(supers > 20, "found only {supers} `super::` paths to check");
}
