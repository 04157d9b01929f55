//! Every script compiles on a real redis-server, with its flags (a syntax error would
//! otherwise show up as a failed lock call somewhere else).

mod support;

use support::RedisServer;

#[test]
fn every_script_loads() {
    let server = RedisServer::start();
    use redis_locks::testing::{sources_of_variant, ScriptVariant};
    let mut n = 0;
    for variant in [
        ScriptVariant::Production,
        ScriptVariant::General,
        ScriptVariant::Probed,
    ] {
        for (name, source) in sources_of_variant(variant) {
            n += 1;
            assert!(source.starts_with("#!lua"), "{name}: no shebang line");
            let sha = server.cli(&["SCRIPT", "LOAD", source]);
            assert_eq!(sha.len(), 40, "{name} ({variant:?}) did not load: {sha}");
        }
    }
    assert!(n >= 3 * 13, "{n} scripts");
}

/// Every file in `lua/` reaches the server: a step file is the script of its own name in
/// `script_sources()` (its fast path, if any, and its general logic at the end of that
/// source), and every helper of the shared files (`prelude.lua`, `*_common.lua`) is part of
/// at least one script (a helper no script calls is dead code). A script added to `lua/` but
/// not to the list in src/scripts.rs (so neither loaded nor run by SHA) fails here.
#[test]
fn every_lua_file_is_a_script_or_part_of_one() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scripts in {}", dir.display());
    let sources = redis_locks::testing::script_sources();
    let mut steps = 0;
    for path in &files {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("file name");
        let text = std::fs::read_to_string(path).expect("script text");
        if stem == "capabilities" {
            // The connect-time probe (tests/capabilities.rs), not a lock step: sent whole,
            // with its own shebang line and no prelude.
            assert!(
                text.starts_with("#!lua\n"),
                "lua/capabilities.lua: no shebang line"
            );
            continue;
        }
        if stem == "prelude" || stem.ends_with("_common") {
            let helpers: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("local function "))
                .collect();
            assert!(
                !helpers.is_empty() || stem != "prelude",
                "no helpers in prelude.lua"
            );
            for helper in helpers {
                assert!(
                    sources.iter().any(|(_, source)| source.contains(helper)),
                    "lua/{stem}.lua: `{helper}` is part of no script (dead code?)"
                );
            }
            continue;
        }
        steps += 1;
        let Some((_, source)) = sources.iter().find(|(name, _)| *name == stem) else {
            panic!("lua/{stem}.lua is not a script of src/scripts.rs");
        };
        let (fast, general) = text
            .split_once("\n-- @general\n")
            .unwrap_or(("", text.as_str()));
        assert!(
            source.ends_with(general),
            "the {stem} script does not end with the general logic of lua/{stem}.lua"
        );
        assert!(
            source.contains(fast),
            "the {stem} script lacks the fast path of lua/{stem}.lua"
        );
    }
    assert_eq!(
        steps,
        sources.len(),
        "src/scripts.rs has scripts without a file in lua/"
    );
}
