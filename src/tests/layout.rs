//! The crate's shape, checked: every `crate::` path in `src/` goes to a lower
//! layer of the list in `src/lib.rs` ("# Layout"), so the module graph has no
//! cycle and no upward arrow; and no function outside the tests is longer
//! than 80 lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest function body allowed outside the tests, in lines.
const MAX_FN_LINES: usize = 80;

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

/// The library's files (not the binary, the tests or the benchmark), each
/// with its top-level module and its text up to its `#[cfg(test)]` module.
fn library_files() -> Vec<(PathBuf, String, String)> {
    let mut files = Vec::new();
    source_files(Path::new("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix("src").unwrap();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let module = first.trim_end_matches(".rs").to_string();
            if ["lib", "main", "bench"].contains(&module.as_str()) {
                return None;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap().to_string();
            Some((path, module, code))
        })
        .collect()
}

/// The top-level modules a file's code names as `crate::x`, `crate::{x, y}`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `noisylab_crate::` and the like
        }
        let rest = &code[i + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap()
                .split(',')
                .map(|item| item.trim().split("::").next().unwrap())
                .collect(),
            None => vec![rest.split("::").next().unwrap()],
        };
        for name in names {
            let name: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
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
    for (path, module, code) in library_files() {
        let own = layers[&module];
        for target in crate_paths(&code) {
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
    for (path, _, code) in library_files() {
        for (line, len) in functions(&code) {
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
fn the_checks_see_what_they_check() {
    // The parsers above find what they are meant to, so the tests cannot
    // pass by finding nothing.
    assert_eq!(
        crate_paths("use crate::a::b;\nuse crate::{c, d::e};\nx = crate::f(1);"),
        ["a", "c", "d", "f"]
    );
    let long_fn = format!("fn f() {{\n{}}}\nfn g() {{ 1 }}\n", "    x;\n".repeat(90));
    assert_eq!(functions(&long_fn), [(1, 92)]);
    let files = library_files();
    assert!(files.iter().any(|(_, m, _)| m == "engine"));
    let total: usize = files.iter().map(|(_, _, c)| functions(c).len()).sum();
    assert!(total > 100, "found only {total} functions");
}
