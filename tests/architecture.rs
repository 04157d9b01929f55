//! The crate's layers, as folders of `src/`, from the bottom:
//!
//! | layer | folder | what |
//! |---|---|---|
//! | 0 | `vocab/` | error type, keys, tokens, options, claims and replies, planted bugs |
//! | 1 | `wire/` | reply and argument formats, the Lua scripts |
//! | 2 | `store/` | the store contract, the wake-up hub, Redis, Sentinel, quorum, in-memory |
//! | 3 | `engine/` | the acquire loop, holds and their renewal, telemetry |
//! | 4 | `api/` | client, handles, guards, multi-locks, elections, inspection |
//! | 5 | `testing.rs` | the test facade (feature `testing`) |
//!
//! A file may import its own layer and the layers below it, never one above: every
//! `crate::…` path in `src/` (outside comments) is checked, `use crate::{…}` groups included,
//! and the crate root's re-exports (`crate::Error`, `crate::LockClient`) count as the top
//! layer, since they are the public API. `lib.rs` and the CLI (`src/bin/`) sit on top of all.

use std::path::{Path, PathBuf};

const LAYERS: &[(&str, u8)] = &[
    ("vocab", 0),
    ("wire", 1),
    ("store", 2),
    ("engine", 3),
    ("api", 4),
    ("testing", 5),
];

fn layer_of(segment: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == segment).map(|(_, l)| *l)
}

/// The source with string literals and comments blanked (line numbers kept).
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            c => out.push(c),
        }
    }
    out
}

/// The first segments of every crate path in `code`: `crate::a::b` gives `a`; `use
/// crate::{a::x, b}` gives `a` and `b`. With the line each is on.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    let mut offset = 0;
    while let Some(at) = rest.find("crate::") {
        let start = offset + at + "crate::".len();
        let line = code[..start].matches('\n').count() + 1;
        let after = &code[start..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            let mut firsts = Vec::new();
            let mut first_taken = false;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        first_taken = false;
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && !first_taken {
                    if c.is_alphanumeric() || c == '_' {
                        item.push(c);
                    } else if !item.is_empty() {
                        firsts.push(item.clone());
                        first_taken = true;
                    }
                }
            }
            if !first_taken && !item.is_empty() {
                firsts.push(item);
            }
            found.extend(firsts.into_iter().map(|f| (line, f)));
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push((line, name));
        }
        offset = start;
        rest = &code[start..];
    }
    found
}

/// The layer a path's first segment points into: a layer folder, or the crate root's
/// re-exports (the top of the library).
fn target_layer(segment: &str) -> Option<u8> {
    match layer_of(segment) {
        Some(l) => Some(l),
        None if segment.starts_with(char::is_uppercase) => Some(4),
        None => None,
    }
}

/// Every import of `code` (in a file of layer `layer`) that points up a layer.
fn upward_imports(code: &str, layer: u8) -> Vec<String> {
    crate_paths(&code_only(code))
        .into_iter()
        .filter_map(|(line, segment)| {
            let target = target_layer(&segment)?;
            (target > layer).then(|| format!("line {line}: crate::{segment} (layer {target})"))
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_import_points_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut checked = 0;
    let mut violations = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let first = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a name");
        let Some(layer) = layer_of(first.trim_end_matches(".rs")) else {
            continue; // lib.rs and bin/: the top
        };
        checked += 1;
        let code = std::fs::read_to_string(&file).expect("read");
        for v in upward_imports(&code, layer) {
            violations.push(format!("src/{}: {v}", rel.display()));
        }
    }
    assert!(checked >= 20, "only {checked} files found under src/");
    assert!(
        violations.is_empty(),
        "imports pointing up a layer:\n{}",
        violations.join("\n")
    );
}

/// The check finds a planted upward import, in every form it can take.
#[test]
fn a_planted_upward_import_is_found() {
    let planted = [
        "use crate::api::guard::Guard;",
        "use crate::{vocab::error::Error, engine::lease::Hold};",
        "fn f() -> crate::LockClient { todo!() }",
        "let x = crate::store::ms(d);",
    ];
    // Each planted into a file of the wire layer (1), among imports that are allowed.
    for line in planted {
        let code = format!(
            "//! docs naming crate::api, which do not count\nuse crate::vocab::claim::Claim;\n{line}\n\
             const S: &str = \"crate::api::in_a_string\";\n"
        );
        let found = upward_imports(&code, 1);
        assert_eq!(found.len(), 1, "{line}: {found:?}");
        assert!(found[0].starts_with("line 3:"), "{line}: {found:?}");
    }
    // Imports of the same layer and below are fine.
    let allowed = "use crate::wire::scripts;\nuse crate::{vocab::keys::LockKeys, wire::Now};\n";
    assert!(upward_imports(allowed, 1).is_empty());
}
