//! A TCP proxy between the library and a redis-server, for network faults: it can stall
//! traffic (stop forwarding without closing, so replies go missing and the client's response
//! timeout fires) and cut every connection at once.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// Which directions are held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stall {
    /// Client to server (requests).
    up: bool,
    /// Server to client (replies).
    down: bool,
}

struct State {
    stall: watch::Sender<Stall>,
    /// Pump tasks of the open connections; aborting them closes both sockets.
    pumps: Mutex<Vec<AbortHandle>>,
    /// Requests stall from the first chunk that contains this (ASCII, any case) on.
    trigger: Mutex<Option<Vec<u8>>>,
}

/// A proxy listening on `127.0.0.1:0` that forwards to `127.0.0.1:<upstream port>`.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
    accept: AbortHandle,
}

impl Proxy {
    /// Starts forwarding to the server on `upstream_port`.
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let (stall, _) = watch::channel(Stall {
            up: false,
            down: false,
        });
        let state = Arc::new(State {
            stall,
            pumps: Mutex::new(Vec::new()),
            trigger: Mutex::new(None),
        });
        let st = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                // The upstream connection is made at once (even while stalled): only the bytes
                // are held back, as on a congested network.
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
                    drop(client);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let up = tokio::spawn(pump(cr, sw, st.clone(), true));
                let down = tokio::spawn(pump(sr, cw, st.clone(), false));
                let mut pumps = st.pumps.lock().unwrap();
                pumps.push(up.abort_handle());
                pumps.push(down.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            port,
            state,
            accept,
        }
    }

    /// `redis://127.0.0.1:<proxy port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops forwarding in both directions; connections stay open.
    pub fn stall(&self) {
        self.set(true, true);
    }

    /// Stops forwarding replies only: requests still reach the server and run, their replies
    /// go missing (the outcome is unknown to the client).
    pub fn stall_replies(&self) {
        self.set(false, true);
    }

    /// Forwards again, including what was held back.
    pub fn resume(&self) {
        self.set(false, false);
    }

    /// Stalls requests (replies still flow) from the first request chunk that contains
    /// `command` (any case), that chunk included: e.g. `b"SUBSCRIBE"` lets every request
    /// before the first subscription through and holds everything from it on.
    pub fn stall_requests_from(&self, command: &[u8]) {
        *self.state.trigger.lock().unwrap() = Some(command.to_ascii_uppercase());
    }

    /// Whether requests are held back now (by [`Proxy::stall`] or a trigger that fired).
    pub fn requests_stalled(&self) -> bool {
        self.state.stall.borrow().up
    }

    fn set(&self, up: bool, down: bool) {
        self.state.stall.send_replace(Stall { up, down });
    }

    /// Closes every open connection (bytes held back are dropped); new ones are accepted.
    pub fn cut(&self) {
        for pump in self.state.pumps.lock().unwrap().drain(..) {
            pump.abort();
        }
    }

    /// Connections opened so far and still forwarding.
    pub fn open_connections(&self) -> usize {
        let pumps = self.state.pumps.lock().unwrap();
        pumps.iter().filter(|p| !p.is_finished()).count() / 2
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Copies `from` to `to`, holding bytes back while this direction is stalled.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, st: Arc<State>, upstream: bool) {
    let mut stall = st.stall.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if upstream {
            let trigger = st.trigger.lock().unwrap().clone();
            if let Some(needle) = trigger {
                let chunk = buf[..n].to_ascii_uppercase();
                if chunk.windows(needle.len()).any(|w| w == needle.as_slice()) {
                    st.stall.send_modify(|s| s.up = true);
                }
            }
        }
        // Wait until this direction flows (a stall set after the read still holds the bytes).
        let stalled = |s: &Stall| if upstream { s.up } else { s.down };
        if stall.wait_for(|s| !stalled(s)).await.is_err() {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Connection settings for a client behind a stalling proxy: short response and connect
/// timeouts, so a stall shows as a failed call within a test's bounds.
pub fn quick() -> redis_locks::RedisConfig {
    redis_locks::RedisConfig {
        response_timeout: super::time::ms(300),
        connect_timeout: super::time::ms(500),
        ..redis_locks::RedisConfig::default()
    }
}

/// A client of redis-server `b` through a new [`Proxy`], with [`quick`] timeouts: the one
/// slow-proxy client of the tests that stall or cut its traffic.
pub async fn slow_client(b: &super::backend::Backend) -> (Proxy, redis_locks::LockClient) {
    let proxy = Proxy::start(b.server.as_ref().expect("server").port()).await;
    let c = redis_locks::LockClient::builder()
        .redis_config(quick())
        .connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    (proxy, c)
}
