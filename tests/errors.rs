//! What a user reads when connecting fails: each cause once in the error chain, a service that
//! is not Redis named as such, and the classification (`is_connection`) kept.

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use redis_locks::{LockClient, RedisConfig};

mod support;

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

/// A loopback port with nothing listening on it.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn quick() -> redis_locks::LockClientBuilder {
    LockClient::builder().redis_config(RedisConfig {
        connect_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(2),
        reconnect_retries: 0,
    })
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
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 512];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}/");
    let err = quick().connect(&url).await.expect_err("not a Redis server");
    let text = err.to_string();
    assert!(text.contains("not a Redis server"), "{err:?}");
    assert!(
        text.contains(&port.to_string()),
        "names the address: {text}"
    );
    drop(service);
}

/// A fake server that answers every command with the `HELLO` map of Redis 6.2; returns its
/// port and the task serving it.
async fn redis_6_2() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let hello = b"%3\r\n+server\r\n+redis\r\n+version\r\n+6.2.14\r\n+proto\r\n:3\r\n";
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                // One reply per command: commands are RESP arrays, each starting with `*`.
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let commands = buf[..n].iter().filter(|&&b| b == b'*').count();
                    for _ in 0..commands {
                        if stream.write_all(hello).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, server)
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
