//! The reference pages in `docs/` say what the binary does: every flag of
//! `redq serve` with its environment variable and default, every metric the
//! server registers, and every relative link of the repository's Markdown
//! leads to a file and heading that exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(relative: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(relative))
        .unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// What `--help` says of one flag.
#[derive(Debug, Default, PartialEq)]
struct Flag {
    env: Option<String>,
    default: Option<String>,
}

/// The flags of `redq serve --help`, by name (without `--`).
fn serve_help_flags() -> BTreeMap<String, Flag> {
    let output = Command::new(env!("CARGO_BIN_EXE_redq"))
        .args(["serve", "--help"])
        .output()
        .expect("run redq serve --help");
    assert!(output.status.success(), "redq serve --help failed");
    let help = String::from_utf8(output.stdout).expect("help is UTF-8");
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines().map(str::trim) {
        let line = line.strip_prefix("-h, ").unwrap_or(line);
        if let Some(rest) = line.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.insert(name.clone(), Flag::default());
            current = Some(name);
        } else if let Some(flag) = current.as_ref().and_then(|name| flags.get_mut(name)) {
            if let Some(env) = line.strip_prefix("[env: ") {
                let name = env.split(['=', ']']).next().unwrap_or_default();
                flag.env = Some(name.to_owned());
            } else if let Some(default) = line.strip_prefix("[default: ") {
                flag.default = Some(default.trim_end_matches(']').to_owned());
            }
        }
    }
    flags.remove("help");
    flags
}

/// The code spans of a Markdown table cell: "`a`, `b` (x)" gives [a, b].
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The rows of the first table after `heading` in `page`, as cells.
fn table_after(page: &str, heading: &str) -> Vec<Vec<String>> {
    let text = read(page);
    let start = text
        .lines()
        .position(|line| line == heading)
        .unwrap_or_else(|| panic!("{page} has no line {heading:?}"));
    text.lines()
        .skip(start + 1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|row| {
            row.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// Flags as documented, from a table whose first cell names one or more
/// flags, with the column of defaults and, where the table has one, of
/// variables (else the variable is `REDQ_` + the name in capitals, as the
/// page says).
fn documented_flags(
    page: &str,
    heading: &str,
    env_column: Option<usize>,
    default_column: usize,
) -> BTreeMap<String, Flag> {
    let mut flags = BTreeMap::new();
    for row in table_after(page, heading) {
        let names: Vec<&str> = code_spans(&row[0])
            .into_iter()
            .map(|flag| {
                flag.strip_prefix("--")
                    .unwrap_or_else(|| panic!("{page}: {flag:?} is not a flag"))
            })
            .collect();
        let envs: Vec<String> = match env_column {
            Some(column) => code_spans(&row[column])
                .into_iter()
                .map(str::to_owned)
                .collect(),
            None => names
                .iter()
                .map(|name| format!("REDQ_{}", name.to_uppercase().replace('-', "_")))
                .collect(),
        };
        // A default cell of one code span per flag gives their defaults;
        // "—" or words ("off") stand for none.
        let defaults = code_spans(&row[default_column]);
        for (i, name) in names.iter().enumerate() {
            let flag = Flag {
                env: envs.get(i).cloned(),
                default: (defaults.len() == names.len()).then(|| defaults[i].to_owned()),
            };
            assert!(
                flags.insert((*name).to_owned(), flag).is_none(),
                "{page}: --{name} twice"
            );
        }
    }
    flags
}

#[test]
fn every_serve_flag_is_documented_with_its_variable_and_default() {
    let help = serve_help_flags();
    let mut documented = documented_flags("docs/configuration.md", "# Configuration", Some(1), 2);
    for (name, flag) in documented_flags("docs/security.md", "## Flags", None, 1) {
        assert!(
            documented.insert(name.clone(), flag).is_none(),
            "--{name} is in both pages"
        );
    }
    let in_help: BTreeSet<&String> = help.keys().collect();
    let in_docs: BTreeSet<&String> = documented.keys().collect();
    assert_eq!(
        in_help.difference(&in_docs).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "flags of `redq serve --help` missing from docs/configuration.md and docs/security.md"
    );
    assert_eq!(
        in_docs.difference(&in_help).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "documented flags that `redq serve` does not have"
    );
    for (name, flag) in &help {
        assert_eq!(&documented[name], flag, "--{name}: docs against --help");
    }
}

/// Names the server registers in src/metrics (the text exposition adds
/// `_total` to counters and `_info` to infos).
fn registered_metrics() -> BTreeSet<String> {
    let dir = Path::new(ROOT).join("src/metrics");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("src/metrics") {
        let source = std::fs::read_to_string(entry.expect("entry").path()).expect("source");
        for call in source.split(".register(").skip(1) {
            let call = call.trim_start();
            if let Some(quoted) = call.strip_prefix('"') {
                names.insert(quoted.split('"').next().unwrap_or_default().to_owned());
            }
        }
    }
    names
}

#[test]
fn every_registered_metric_is_documented_and_every_documented_one_exists() {
    let mut documented = BTreeSet::new();
    for row in table_after("docs/metrics.md", "# Metrics") {
        let name = code_spans(&row[0])[0];
        let registered = match row[1].as_str() {
            "counter" => name.strip_suffix("_total"),
            "info" => name.strip_suffix("_info"),
            "gauge" | "histogram" => Some(name),
            other => panic!("docs/metrics.md: {name} has type {other:?}"),
        }
        .unwrap_or_else(|| panic!("docs/metrics.md: {name} lacks its type's suffix"));
        documented.insert(registered.to_owned());
    }
    let registered = registered_metrics();
    assert!(
        registered.len() > 20,
        "found only {registered:?} in src/metrics"
    );
    assert_eq!(
        registered.difference(&documented).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "metrics registered in src/metrics but missing from docs/metrics.md"
    );
    assert_eq!(
        documented.difference(&registered).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "metrics in docs/metrics.md that the server does not register"
    );
}

/// The repository's own Markdown files: all but those of build output,
/// installed packages and hidden folders (virtualenvs, `.git`).
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a folder of the repository") {
            let path = entry.expect("a folder entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if path.is_dir() {
                walk(&path, found);
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new(ROOT), &mut found);
    found
}

/// `text` without its fenced code blocks.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The anchors of a page's headings, as GitHub makes them: lower case,
/// punctuation dropped, spaces turned into hyphens.
fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|line| line.starts_with('#'))
        .filter_map(|line| line.trim_start_matches('#').strip_prefix(' '))
        .map(|title| {
            title
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// Targets of inline links, `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    prose(text)
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| !target.is_empty() && !target.contains(' '))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_relative_link_in_the_markdown_leads_to_a_file_and_heading() {
    let files = markdown_files();
    assert!(files.len() >= 8, "found only {files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("markdown");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a file's folder").join(path)
            };
            let shown = file.strip_prefix(ROOT).unwrap_or(file).display();
            if !linked.exists() {
                broken.push(format!("{shown}: {target} (no such file)"));
            } else if !anchor.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                let page = std::fs::read_to_string(&linked).expect("linked page");
                if !anchors(&page).contains(anchor) {
                    broken.push(format!("{shown}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
