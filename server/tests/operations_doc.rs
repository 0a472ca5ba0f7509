//! docs/operations.md is kept in step with the code, as `api_doc.rs` keeps docs/api.md: its
//! settings table is what `onsale settings` prints (`ONSALE_BLESS=1` writes it anew), every row
//! says what it sets, and every variable the product's code names is in it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const START: &str = "<!-- settings:start -->\n";
const END: &str = "<!-- settings:end -->";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn settings() -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onsale"))
        .arg("settings")
        .env_clear()
        .output()
        .expect("onsale settings runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn the_operators_guide_lists_every_setting_as_the_code_defines_it() {
    let path = root().join("docs/operations.md");
    let doc = std::fs::read_to_string(&path).expect("docs/operations.md");
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        panic!("docs/operations.md has no {START:?} ... {END:?} section");
    };
    let (held, table) = (&doc[start + START.len()..end], settings());
    if held != table {
        if std::env::var_os("ONSALE_BLESS").is_some() {
            let new = format!("{}{table}{}", &doc[..start + START.len()], &doc[end..]);
            std::fs::write(&path, new).expect("docs/operations.md written");
        } else {
            panic!(
                "docs/operations.md's settings differ from `onsale settings`; run this test \
                 with ONSALE_BLESS=1 to write them, and read the change\n--- held\n{held}\n--- \
                 code\n{table}"
            );
        }
    }
    for row in table.lines().skip(2) {
        let what = row.trim_end_matches('|').rsplit('|').next().unwrap_or("");
        assert!(
            !what.trim().is_empty(),
            "a setting with no description: {row}"
        );
    }
}

/// The variables named in a crate's code outside its tests (test modules at the end of a
/// file, after `#[cfg(test)]`, or in files of their own: `tests.rs`, `*_tests.rs`).
fn named_in(dir: &Path, names: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            named_in(&path, names);
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("\"ONSALE_") {
            let name: String = rest[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + 1 + name.len()..];
            if rest.starts_with('"') {
                names.insert(name);
            }
        }
    }
}

#[test]
fn every_variable_the_code_names_is_in_the_table() {
    let crates = [
        "server",
        "command-side",
        "query-side",
        "projections",
        "kafka",
        "edge",
        "payments",
        "waiting-room",
        "export",
        "telemetry",
        "eventlog",
        "domain",
    ];
    let mut names = BTreeSet::new();
    for c in crates {
        named_in(&root().join(c).join("src"), &mut names);
    }
    assert!(names.len() > 50, "found only {names:?}");
    let table = settings();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !table.contains(&format!("| `{n}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "named in the code, not in `onsale settings`: {missing:?}"
    );
}
