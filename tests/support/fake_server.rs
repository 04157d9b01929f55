//! A fake server on loopback, for what no real server here lacks (a clock that answers `0 0`
//! inside scripts, `PEXPIRE` without `GT`): it reads commands (RESP arrays of bulk strings)
//! and answers each with the bytes a function of the command gives, so a test strips exactly
//! one capability and the rest looks like Redis 7.2.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the fake answers to a command (its words, the command name upper-cased).
pub type Answer = dyn Fn(&[String]) -> Vec<u8> + Send + Sync;

/// A fake server listening on `127.0.0.1:<port>`; stops when dropped.
pub struct FakeServer {
    port: u16,
    task: JoinHandle<()>,
}

impl FakeServer {
    /// Serves every connection with `answer`.
    pub async fn start(answer: impl Fn(&[String]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let answer: Arc<Answer> = Arc::new(answer);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, answer.clone()));
            }
        });
        FakeServer { port, task }
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(stream: TcpStream, answer: Arc<Answer>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    while let Some(mut command) = read_command(&mut read).await {
        if let Some(name) = command.first_mut() {
            *name = name.to_ascii_uppercase();
        }
        if write.write_all(&answer(&command)).await.is_err() {
            return;
        }
    }
}

/// One command: `*N` then N bulk strings; `None` at the end of the stream or on garbage.
async fn read_command(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<Vec<String>> {
    let count: usize = header(read, b'*').await?;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let len: usize = header(read, b'$').await?;
        let mut word = vec![0; len + 2];
        read.read_exact(&mut word).await.ok()?;
        word.truncate(len);
        words.push(String::from_utf8_lossy(&word).into_owned());
    }
    Some(words)
}

async fn header(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>, kind: u8) -> Option<usize> {
    let mut line = String::new();
    if read.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let line = line.trim_end();
    (line.as_bytes().first() == Some(&kind)).then_some(())?;
    line[1..].parse().ok()
}

/// `HELLO`'s map from a Redis of `version`, speaking protocol `proto`.
pub fn hello(version: &str, proto: u8) -> Vec<u8> {
    format!("%3\r\n+server\r\n+redis\r\n+version\r\n+{version}\r\n+proto\r\n:{proto}\r\n")
        .into_bytes()
}

/// A bulk string.
pub fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// An array of replies.
pub fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(item);
    }
    out
}

/// An error reply (`text` starts with its code).
pub fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

/// An integer.
pub fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

/// What Redis 7.2 answers to the commands of a connect other than the capability probe's
/// script (`HELLO`, `SCRIPT LOAD`, `PING`, `INFO`, `PUBLISH` ...), or `None` for `EVALSHA`
/// and `EVAL`.
pub fn like_redis(command: &[String]) -> Option<Vec<u8>> {
    let name = command.first().map(String::as_str).unwrap_or("");
    Some(match name {
        "HELLO" => hello("7.2.4", 3),
        "SCRIPT" => bulk(&"0".repeat(40)),
        "PING" => b"+PONG\r\n".to_vec(),
        "INFO" => bulk(
            "# Server\r\nredis_version:7.2.4\r\n# Memory\r\nmaxmemory:0\r\n\
             maxmemory_policy:noeviction\r\n",
        ),
        "PUBLISH" | "SPUBLISH" => int(0),
        "EVALSHA" | "EVAL" => return None,
        _ => b"+OK\r\n".to_vec(),
    })
}

/// The capability probe's reply: `TIME`'s two numbers, then what `PEXPIRE` with `GT` and
/// with `NX` answered (`None`: accepted).
pub fn probe_reply(seconds: u64, micros: u64, gt: Option<&str>, nx: Option<&str>) -> Vec<u8> {
    let option = |refused: Option<&str>| refused.map_or_else(|| int(1), bulk);
    array(&[
        bulk(&seconds.to_string()),
        bulk(&micros.to_string()),
        option(gt),
        option(nx),
    ])
}

/// A loopback port nothing listens on.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A client builder for the connect checks: 2 s connect and response timeouts, no reconnect
/// retries, so a refused or silent server fails the connect at once.
pub fn quick() -> redis_locks::LockClientBuilder {
    redis_locks::LockClient::builder().redis_config(redis_locks::RedisConfig {
        connect_timeout: std::time::Duration::from_secs(2),
        response_timeout: std::time::Duration::from_secs(2),
        reconnect_retries: 0,
    })
}
