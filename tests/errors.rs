//! What a user reads when connecting fails: each cause once in the error chain, a service that
//! is not Redis named as such, and the classification (`is_connection`) kept.

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use redis_locks::{LockClient, RedisConfig};

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
