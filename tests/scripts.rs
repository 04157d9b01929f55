//! Every script compiles on a real redis-server, with its flags (a syntax error would
//! otherwise show up as a failed lock call somewhere else).

mod support;

use support::RedisServer;

#[test]
fn every_script_loads() {
    let server = RedisServer::start();
    assert!(!redis_locks::testing::SCRIPT_SOURCES.is_empty());
    for (name, source) in redis_locks::testing::SCRIPT_SOURCES {
        assert!(source.starts_with("#!lua"), "{name}: no shebang line");
        let sha = server.cli(&["SCRIPT", "LOAD", source]);
        assert_eq!(sha.len(), 40, "{name} did not load: {sha}");
    }
}

/// Every file in `lua/` reaches the server: a step file is the script of its own name in
/// `SCRIPT_SOURCES` (its text at the end of that source), and the shared files (`prelude.lua`,
/// `*_common.lua`) are part of a source. A script added to `lua/` but not to `SOURCES` (so
/// neither loaded nor run by SHA) fails here.
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
    let sources = redis_locks::testing::SCRIPT_SOURCES;
    let mut steps = 0;
    for path in &files {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("file name");
        let text = std::fs::read_to_string(path).expect("script text");
        if stem == "prelude" || stem.ends_with("_common") {
            assert!(
                sources.iter().any(|(_, source)| source.contains(&text)),
                "lua/{stem}.lua is part of no script in SCRIPT_SOURCES"
            );
            continue;
        }
        steps += 1;
        let Some((_, source)) = sources.iter().find(|(name, _)| *name == stem) else {
            panic!("lua/{stem}.lua is not in SCRIPT_SOURCES (src/scripts.rs)");
        };
        assert!(
            source.ends_with(&text),
            "SCRIPT_SOURCES[{stem}] does not end with lua/{stem}.lua"
        );
    }
    assert_eq!(
        steps,
        sources.len(),
        "SCRIPT_SOURCES has entries without a file in lua/"
    );
}
