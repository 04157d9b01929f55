//! What a user reads when connecting fails: each cause once in the error chain, a service that
//! is not Redis named as such, and the classification (`is_connection`) kept.

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpListener;

mod support;
use support::fake_server::{closed_port, quick};
use support::time::{ms, secs};

/// The error and all its sources, one per line, as an error reporter prints them.
fn chain(err: &redis_locks::Error) -> String {
    let mut lines = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        lines.push(s.to_string());
        source = s.source();
    }
    lines.join("\n")
}

#[tokio::test]
async fn a_refused_connection_is_reported_once_in_the_chain() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let err = quick()
        .connect(&url)
        .await
        .expect_err("nothing listens there");
    assert!(err.is_connection(), "{err:?}");
    let chain = chain(&err);
    let times = chain.to_lowercase().matches("refused").count();
    assert_eq!(times, 1, "the cause should be printed once:\n{chain}");
    assert!(
        err.to_string().contains("reachable"),
        "the top message says what to check: {err}"
    );
}

#[tokio::test]
async fn a_service_that_is_not_redis_is_named_as_such() {
    // An HTTP-like service: reads whatever comes and answers with a line that is not RESP.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let service = std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(ms(500)));
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}/");
    let err = quick().connect(&url).await.expect_err("not a Redis server");
    let text = err.to_string();
    assert!(text.contains("not a Redis server"), "{err:?}");
    assert!(text.contains("answered like HTTP"), "{err:?}");
    // No raw bytes of the parse error, in the message or the chain.
    let debug = format!("{err:?}");
    assert!(
        !debug.contains("Unexpected") && !debug.contains("Parse"),
        "{debug}"
    );
    assert!(
        text.contains(&port.to_string()),
        "names the address: {text}"
    );
    drop(service);
}

/// A fake Redis of `version` on loopback that answers `HELLO` with its map and every other
/// command with `others` (the `HELLO` map too if `None`); returns its port and the task
/// serving it.
async fn fake_redis(
    version: &str,
    others: Option<&'static [u8]>,
) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
    let listener = listener.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hello = format!("%3\r\n+server\r\n+redis\r\n+version\r\n+{version}\r\n+proto\r\n:3\r\n");
    let hello: &'static [u8] = hello.leak().as_bytes();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                // One reply per command: commands are RESP arrays, each starting with `*`.
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]).to_uppercase();
                    for command in text.split('*').filter(|c| !c.is_empty()) {
                        let reply = match others {
                            Some(others) if !command.contains("HELLO") => others,
                            _ => hello,
                        };
                        if stream.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, server)
}

/// A fake server that answers every command with the `HELLO` map of Redis 6.2.
async fn redis_6_2() -> (u16, tokio::task::JoinHandle<()>) {
    fake_redis("6.2.14", None).await
}

/// A server that answers like Redis 6.2 is refused at connect with the versions the library
/// needs.
#[tokio::test]
async fn a_server_older_than_redis_7_is_refused_at_connect() {
    let (port, server) = redis_6_2().await;
    let url = format!("redis://127.0.0.1:{port}/");
    let err = quick()
        .connect(&url)
        .await
        .expect_err("Redis 6.2 is refused");
    let text = err.to_string();
    assert!(
        matches!(err, redis_locks::Error::UnsupportedServer { .. }),
        "{err:?}"
    );
    assert!(
        text.contains("6.2.14") && text.contains("Redis 7.0 or later"),
        "{text}"
    );
    server.abort();
}

/// A quorum with one server older than Redis 7 is refused at connect, although the two
/// others (a majority) are fine.
#[tokio::test]
async fn a_quorum_with_an_old_server_is_refused_at_connect() {
    let (port, server) = redis_6_2().await;
    let a = support::RedisServer::start();
    let b = support::RedisServer::start();
    let old = format!("redis://127.0.0.1:{port}/");
    let urls = [a.url(), b.url(), old];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = quick()
        .quorum(&urls)
        .await
        .expect_err("a quorum with Redis 6.2 is refused");
    assert!(
        matches!(err, redis_locks::Error::UnsupportedServer { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("6.2.14"), "{err}");
    server.abort();
}

/// With Redis down, the message names the operation, the address and the cause once, and
/// the `Debug` form (what `fn main() -> redis_locks::Result<()>` prints) reads the same.
#[tokio::test]
async fn a_refused_connection_names_the_operation_the_address_and_the_cause() {
    let port = closed_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let err = quick().connect(&url).await.expect_err("nothing listens");
    let text = err.to_string();
    assert!(text.contains("connect"), "names the operation: {text}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}")),
        "names the address: {text}"
    );
    assert_eq!(text.to_lowercase().matches("refused").count(), 1, "{text}");
    let debug = format!("{err:?}");
    assert!(debug.starts_with(&text), "Debug reads as Display: {debug}");
    // The message is whole: no source repeats its cause (error.rs says so).
    assert!(err.source().is_none(), "{err:?}");
    assert!(!debug.contains("Cause("), "no internal wrapper: {debug}");
    assert_eq!(
        debug.to_lowercase().matches("refused").count(),
        1,
        "{debug}"
    );
}

/// A malformed URL shows the form the library expects.
#[tokio::test]
async fn a_malformed_url_shows_the_expected_form() {
    for url in [
        "localhost:6379",
        "redis//127.0.0.1",
        "http://127.0.0.1:6379/",
    ] {
        let err = quick().connect(url).await.expect_err("malformed");
        assert!(err.is_invalid_input(), "{url}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains("redis://[user:password@]host:port[/db]"),
            "{url}: {text}"
        );
    }
}

/// A database index beyond the server's `databases` gets advice about that, not about ACL
/// rights or memory.
#[tokio::test]
async fn a_database_index_out_of_range_gets_database_advice() {
    let server = support::RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    let err = quick()
        .connect(&url)
        .await
        .expect_err("db 99 does not exist");
    let text = err.to_string();
    assert!(text.contains("databases"), "{text}");
    assert!(!text.contains("ACL") && !text.contains("memory"), "{text}");
}

/// A command the Redis user may not run gets ACL advice, not memory advice.
#[tokio::test]
async fn noperm_gets_acl_advice() {
    let server = support::RedisServer::start();
    server.cli(&[
        "ACL",
        "SETUSER",
        "lean",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@connection",
    ]);
    let url = format!("redis://lean:pw@127.0.0.1:{}/", server.port());
    let client = quick().connect(&url).await.expect("HELLO is allowed");
    let err = client
        .mutex("m")
        .try_lock()
        .await
        .expect_err("no EVALSHA right");
    let text = err.to_string();
    assert!(text.contains("NOPERM") && text.contains("ACL"), "{text}");
    assert!(!text.contains("memory"), "{text}");
}

/// Memory full gets memory advice, not ACL advice.
#[tokio::test]
async fn oom_gets_memory_advice() {
    let server = support::RedisServer::start();
    let client = quick().connect(&server.url()).await.expect("connect");
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let err = client.mutex("m").try_lock().await.expect_err("memory full");
    let text = err.to_string();
    assert!(text.contains("OOM") && text.contains("maxmemory"), "{text}");
    assert!(!text.contains("ACL"), "{text}");
}

/// Another program's value at a lock's key is named as such.
#[tokio::test]
async fn wrongtype_names_a_foreign_key() {
    let server = support::RedisServer::start();
    let client = quick().connect(&server.url()).await.expect("connect");
    let fence = client.keys("m").expect("keys").fence();
    server.cli(&["HSET", &fence, "not", "a-counter"]);
    let err = client
        .mutex("m")
        .try_lock()
        .await
        .expect_err("foreign data");
    assert!(err.is_wrong_type(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("foreign") && text.contains("`m`"), "{text}");
    // It names the key and what is wrong with it.
    assert!(
        text.contains(&format!("`{fence}`")) && text.contains("hash"),
        "{text}"
    );
    assert!(
        matches!(&err, redis_locks::Error::WrongType { key: Some(k), .. } if *k == fence),
        "{err:?}"
    );
    assert!(!text.contains("ACL") && !text.contains("memory"), "{text}");
}

/// A server busy running a script: the wait gives up at its outage budget with advice to
/// retry (or kill the script), not ACL or memory advice.
#[tokio::test]
async fn busy_gets_retry_advice() {
    let server = support::RedisServer::start_with(&["--busy-reply-threshold", "50"]);
    let client = quick().connect(&server.url()).await.expect("connect");
    let port = server.port().to_string();
    let busy = std::thread::spawn(move || {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &port, "EVAL", "while true do end", "0"])
            .output();
    });
    tokio::time::sleep(ms(300)).await;
    let err = client
        .mutex("m")
        .outage_budget(secs(1))
        .lock()
        .timeout(secs(5))
        .await
        .expect_err("server busy");
    server.cli(&["SCRIPT", "KILL"]);
    busy.join().expect("redis-cli");
    let text = err.to_string();
    assert!(text.contains("BUSY") && text.contains("retry"), "{text}");
    assert!(!text.contains("ACL") && !text.contains("memory"), "{text}");
}

/// A server still loading its data set after a restart: advice to retry once loaded, in
/// Redis's wording and in Valkey's (the same code, its own name in the message).
#[tokio::test]
async fn loading_gets_retry_advice() {
    for loading in [
        &b"-LOADING Redis is loading the dataset in memory\r\n"[..],
        &b"-LOADING Valkey is loading the dataset in memory\r\n"[..],
    ] {
        let (port, server) = loading_server(loading).await;
        let url = format!("redis://127.0.0.1:{port}/");
        let client = quick().connect(&url).await.expect("HELLO answers");
        let err = client
            .mutex("m")
            .outage_budget(secs(1))
            .lock()
            .timeout(secs(5))
            .await
            .expect_err("still loading");
        let text = err.to_string();
        assert!(text.contains("LOADING") && text.contains("retry"), "{text}");
        // ("loading the dataset in memory" is the server's own wording.)
        assert!(
            !text.contains("ACL") && !text.contains("maxmemory"),
            "{text}"
        );
        server.abort();
    }
}

/// A fake Redis 7.2 that answers `HELLO` and refuses every other command with `loading` (a
/// `LOADING` error reply), as a server does while it loads its data set.
async fn loading_server(loading: &'static [u8]) -> (u16, tokio::task::JoinHandle<()>) {
    fake_redis("7.2.4", Some(loading)).await
}
