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
