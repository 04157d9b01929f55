//! The docs say what the code does: every `cargo test` / `cargo nextest run` command of
//! README.md and docs/ builds as written (every integration test needs the `testing`
//! feature, so each passes `--all-features`, and each `--test NAME` names a test file), and no
//! doc links to a page of this crate that is not published.

use std::path::{Path, PathBuf};

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// README.md and every Markdown file under docs/.
fn markdown() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    files(&root.join("docs"), "md", &mut out);
    out
}

/// Every `cargo test ...` or `cargo nextest run ...` command in `text`: a line of a code
/// block, or an inline code span.
fn test_commands(text: &str) -> Vec<String> {
    let is_test = |s: &str| s.contains("cargo test") || s.contains("cargo nextest run");
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let cmd = line.split(" #").next().unwrap_or("").trim();
            if is_test(cmd) {
                out.push(cmd.to_owned());
            }
        } else {
            for span in line.split('`').skip(1).step_by(2) {
                if is_test(span) {
                    out.push(span.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn documented_test_commands_build_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for file in markdown() {
        let text = std::fs::read_to_string(&file).expect("read");
        for cmd in test_commands(&text) {
            seen += 1;
            let where_ = format!("{}: `{cmd}`", file.display());
            assert!(
                cmd.contains("--all-features"),
                "{where_}: the integration tests and the doc tests need the `testing` \
                 feature; give the command --all-features"
            );
            let words: Vec<&str> = cmd.split_whitespace().collect();
            for pair in words.windows(2) {
                if pair[0] == "--test" {
                    let target = root.join("tests").join(format!("{}.rs", pair[1]));
                    assert!(
                        target.exists(),
                        "{where_}: no test file {}",
                        target.display()
                    );
                }
            }
        }
    }
    assert!(seen >= 6, "the commands were found ({seen})");
}

#[test]
fn the_finder_sees_a_bare_command() {
    let found = test_commands("run `cargo test --test model` now\n```sh\ncargo test  # CI\n```\n");
    assert_eq!(found, ["cargo test --test model", "cargo test"]);
}

/// The crate is not published: a link to its docs.rs pages leads nowhere. Docs name files of
/// the source (`docs/SCALE.md`) or items (intra-doc links) instead.
#[test]
fn no_link_to_unpublished_pages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = markdown();
    files(&root.join("src"), "rs", &mut sources);
    for file in sources {
        let text = std::fs::read_to_string(&file).expect("read");
        for (i, line) in text.lines().enumerate() {
            assert!(
                !line.contains("docs.rs/crate/redis-locks")
                    && !line.contains("docs.rs/redis-locks/"),
                "{}:{}: {line}",
                file.display(),
                i + 1
            );
        }
    }
}
