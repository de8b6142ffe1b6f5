//! The README and `docs/` checked against the software they describe:
//!
//! - every block between `<!-- generated: noisylab ARGS [| FILTER]… -->`
//!   and `<!-- /generated -->` is what that command prints today from the
//!   committed files (`make docs` rewrites them: `NOISYLAB_WRITE_DOCS=1`);
//! - every `noisylab …` and `make …` command in a code block or code span
//!   parses: the subcommand, flags and values against the CLI, the target
//!   against the Makefile, and a path under `lab/` or `reports/` exists;
//! - every relative link, and every `#anchor`, resolves.
//!
//! Filters after `|`: `tables N,M` keeps those markdown tables (from 1),
//! `lines A-B` those lines (from 1), `code` puts the text in a `text` fence.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use noisylab::cli::Cli;

const OPEN: &str = "<!-- generated: ";
const CLOSE: &str = "<!-- /generated -->";

/// README.md and every markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir("docs")
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 5, "docs/ holds the subjects: {docs:?}");
    out.extend(docs);
    out
}

/// One generated block: the marker's text and where its body lies.
struct Block {
    spec: String,
    body: std::ops::Range<usize>,
}

fn blocks(text: &str, page: &Path) -> Vec<Block> {
    let mut out = Vec::new();
    let mut from = 0;
    // A marker begins its line; one quoted in prose does not.
    while let Some(at) = text[from..].find(&format!("\n{OPEN}")) {
        let start = from + at + 1;
        let line_end = start + text[start..].find('\n').expect("a marker ends its line");
        let spec = text[start + OPEN.len()..line_end]
            .trim()
            .strip_suffix("-->")
            .unwrap_or_else(|| panic!("{}: a marker ends with -->", page.display()))
            .trim()
            .to_string();
        let close = line_end
            + text[line_end..]
                .find(CLOSE)
                .unwrap_or_else(|| panic!("{}: {spec:?} has no {CLOSE}", page.display()));
        out.push(Block {
            spec,
            body: line_end + 1..close,
        });
        from = close + CLOSE.len();
    }
    out
}

/// What a block's marker says its body is, from the binary built for the tests.
fn generate(spec: &str) -> String {
    let mut parts = spec.split('|').map(str::trim);
    let command = parts.next().unwrap();
    let words = shell_words::split(command).unwrap();
    assert_eq!(words[0], "noisylab", "{spec}: a marker runs noisylab");
    let out = Command::new(env!("CARGO_BIN_EXE_noisylab"))
        .args(&words[1..])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // `validate` exits 1 on a failing check: its output is still the figure.
    let allowed = if words[1] == "validate" { 1 } else { 0 };
    assert!(
        out.status.code().is_some_and(|c| c <= allowed),
        "{spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = String::from_utf8(out.stdout).unwrap();
    for filter in parts {
        text = apply(filter, &text, spec);
    }
    ensure_newline(&text)
}

fn apply(filter: &str, text: &str, spec: &str) -> String {
    let (name, arg) = filter.split_once(' ').unwrap_or((filter, ""));
    match name {
        "tables" => {
            let tables = markdown_tables(text);
            let picked: Vec<String> = arg
                .split(',')
                .map(|n| {
                    let n: usize = n.trim().parse().unwrap();
                    tables
                        .get(n - 1)
                        .unwrap_or_else(|| panic!("{spec}: no table {n}"))
                        .clone()
                })
                .collect();
            picked.join("\n")
        }
        "lines" => {
            let (a, b) = arg.split_once('-').unwrap();
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            let lines: Vec<&str> = text.lines().collect();
            assert!(b <= lines.len(), "{spec}: {} lines only", lines.len());
            lines[a - 1..b].join("\n") + "\n"
        }
        "code" => format!("```text\n{}```", ensure_newline(text)),
        _ => panic!("{spec}: unknown filter {name:?} (tables N,M; lines A-B; code)"),
    }
}

fn ensure_newline(text: &str) -> String {
    if text.ends_with('\n') {
        text.to_string()
    } else {
        format!("{text}\n")
    }
}

/// The markdown tables of a text, each with its lines.
fn markdown_tables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.starts_with('|') {
            current.push_str(line);
            current.push('\n');
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[test]
fn generated_blocks_are_what_the_tool_prints_now() {
    let write = std::env::var_os("NOISYLAB_WRITE_DOCS").is_some();
    let mut stale = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut next = String::new();
        let mut last = 0;
        for block in blocks(&text, &page) {
            let now = generate(&block.spec);
            if text[block.body.clone()] != now {
                stale.push(format!("{}: {}", page.display(), block.spec));
            }
            next.push_str(&text[last..block.body.start]);
            next.push_str(&now);
            last = block.body.end;
            count += 1;
        }
        next.push_str(&text[last..]);
        if write && next != text {
            std::fs::write(&page, next).unwrap();
        }
    }
    assert!(
        count >= 10,
        "the pages' tables are generated: {count} blocks"
    );
    assert!(
        write || stale.is_empty(),
        "these blocks differ from what the tool prints now (`make docs` rewrites them):\n{}",
        stale.join("\n")
    );
}

/// The text outside generated blocks.
fn prose(text: &str, page: &Path) -> String {
    let mut out = String::new();
    let mut last = 0;
    for block in blocks(text, page) {
        out.push_str(&text[last..block.body.start]);
        last = block.body.end;
    }
    out.push_str(&text[last..]);
    out
}

/// Every command a page shows: lines of its code blocks (a line ending in
/// `\\` goes on on the next) and code spans (which may wrap) that start with
/// `noisylab ` or `make `. A span naming a command alone (`noisylab
/// worker`) is a name, not a command line, and is left out.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut prose = String::new();
    let mut continued = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push(' ');
            continue;
        }
        let line = format!("{continued}{}", line.trim().trim_start_matches("$ "));
        if let Some(head) = line.strip_suffix('\\') {
            continued = head.to_string();
            continue;
        }
        continued.clear();
        if line.starts_with("noisylab ") || line.starts_with("make ") {
            out.push(line);
        }
    }
    for (i, span) in prose.split('`').enumerate() {
        let is_command = span.starts_with("noisylab ") || span.starts_with("make ");
        if i % 2 == 1 && is_command && span.split_whitespace().count() > 2 {
            out.push(span.to_string());
        }
    }
    out
}

/// The words of a shell line up to a comment, redirection or pipe.
fn words(line: &str) -> Vec<String> {
    let line = line.split(" #").next().unwrap();
    let line = line.split(['>', '|', '<', ';']).next().unwrap();
    let line = line.split("&&").next().unwrap();
    shell_words::split(line.trim()).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// A word with `*` in it: the repository's files it names.
fn glob(word: &str) -> Vec<String> {
    let (dir, pattern) = word.rsplit_once('/').unwrap_or((".", word));
    let (head, tail) = pattern.split_once('*').unwrap();
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.starts_with(head) && n.ends_with(tail) && n.len() >= pattern.len() - 1
                })
                .map(|n| format!("{dir}/{n}"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn make_targets() -> BTreeSet<String> {
    std::fs::read_to_string("Makefile")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(['\t', '#', '.', ' ']))
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, rest)| !rest.starts_with('=') && !name.contains(' '))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Why a command line does not run as written, if it does not.
fn check_command(line: &str, targets: &BTreeSet<String>) -> Option<String> {
    let words = words(line);
    if words[0] == "make" {
        return words[1..]
            .iter()
            .filter(|w| !w.contains('='))
            .find(|w| !targets.contains(*w))
            .map(|w| format!("no make target {w:?}"));
    }
    let mut args = Vec::new();
    for word in &words {
        let in_repo = word.starts_with("lab/") || word.starts_with("reports/");
        if word.contains('*') && in_repo {
            let found = glob(word);
            if found.is_empty() {
                return Some(format!("{word} names no file"));
            }
            args.extend(found);
        } else {
            if in_repo && !word.contains('*') && !Path::new(word).exists() {
                return Some(format!("{word} does not exist"));
            }
            args.push(word.clone());
        }
    }
    use clap::error::ErrorKind;
    match Cli::try_parse_from(&args) {
        Ok(_) => None,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => None,
        Err(e) => Some(e.to_string().lines().next().unwrap_or("").to_string()),
    }
}

#[test]
fn every_command_shown_parses() {
    let targets = make_targets();
    assert!(targets.contains("lab") && targets.contains("test"));
    let mut wrong = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for line in commands(&prose(&text, &page)) {
            count += 1;
            if let Some(why) = check_command(&line, &targets) {
                wrong.push(format!("{}: `{line}`: {why}", page.display()));
            }
        }
    }
    assert!(count >= 30, "the pages show commands: {count}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checker_refuses_what_does_not_run() {
    let targets = make_targets();
    let bad = [
        "noisylab run --clok virtual",
        "noisylab run --clock sideways",
        "noisylab bands --seeds 0",
        "noisylab frobnicate",
        "noisylab run lab/nothing-here.toml",
        "noisylab validate reports/runs/*-vm-article.json",
        "make lab-mysql",
    ];
    for line in bad {
        assert!(
            check_command(line, &targets).is_some(),
            "{line} should be refused"
        );
    }
    let good = [
        "noisylab run lab/article.toml --clock virtual  # a comment",
        "noisylab help run",
        "noisylab scenario article > my.toml",
        "make lab",
    ];
    for line in good {
        assert_eq!(check_command(line, &targets), None, "{line}");
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens; repeats get `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut name = slug.clone();
        let mut n = 0;
        while out.contains(&name) {
            n += 1;
            name = format!("{slug}-{n}");
        }
        out.insert(name);
    }
    out
}

/// Every `](target)` of a page outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        let outside_code: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut wrong = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            count += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                wrong.push(format!("{}: {link}: no such file", page.display()));
                continue;
            }
            if !anchor.is_empty() {
                let text = std::fs::read_to_string(&target).unwrap();
                if !anchors(&text).contains(anchor) {
                    wrong.push(format!("{}: {link}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(count >= 20, "the pages link to each other: {count}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_readme_is_short_and_every_doc_says_what_it_answers() {
    let readme = std::fs::read_to_string("README.md").unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines; at most 300");
    for page in pages().iter().skip(1) {
        let text = std::fs::read_to_string(page).unwrap();
        let opening = text.lines().find(|l| !(l.starts_with('#') || l.is_empty()));
        assert!(
            opening.is_some_and(|l| !l.starts_with(['|', '`', '<', '-'])),
            "{}: opens with a sentence saying what it answers",
            page.display()
        );
        assert!(
            readme.contains(&format!("({})", page.display())),
            "README.md links to {}",
            page.display()
        );
    }
}
