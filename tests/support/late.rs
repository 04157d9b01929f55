//! Helpers of the tests of requests that reach the server late (`tests/late_requests.rs`):
//! a watch of a guard against the server and a contender, and a TCP proxy that holds a
//! connection's requests and cuts its client side while the server side lives on, so held
//! requests reach the server after the client reconnected.

use std::sync::Arc;
use std::time::Duration;

use redis_locks::{LockClient, LockInfo};
use tokio::time::Instant;

use redis_locks::testing::store::RedisStore;

use crate::backend::Backend;
use crate::faulty::Faulty;
use crate::honest::assert_honest;
use crate::time::ms;
use crate::Granted;

/// Watches a guard for `how_long`: its trust (`trusted()`, read before each `inspect`) must
/// stay within the server's lease, and `contend` (another client's try, which releases what
/// it got and returns its fence) must never be granted while the guard says `is_held()`. A
/// trust past the server's lease is reported at the end (or with the second holder it lets
/// in).
pub async fn watch(
    what: &str,
    held: impl Fn() -> bool,
    trusted: impl Fn() -> Instant,
    mut inspect: impl AsyncFnMut() -> LockInfo,
    mut contend: impl AsyncFnMut() -> Option<u64>,
    how_long: Duration,
) {
    let end = Instant::now() + how_long;
    let mut dishonest: Option<String> = None;
    while Instant::now() < end {
        let valid_until = trusted();
        let info = inspect().await;
        let answered = Instant::now();
        let was_held = held();
        if was_held && dishonest.is_none() {
            let check =
                std::panic::catch_unwind(|| assert_honest(what, valid_until, &info, answered));
            if let Err(e) = check {
                let text = e
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "dishonest".into());
                dishonest = Some(format!("{text} (server: {info:?})"));
            }
        }
        if let Some(fence) = contend().await {
            assert!(
                !(was_held && held()),
                "{what}: another client was granted the lock (fence {fence}) while the guard \
                 says is_held(); earlier: {dishonest:?}"
            );
        }
        tokio::time::sleep(ms(40)).await;
    }
    if let Some(text) = dishonest {
        panic!("{text}");
    }
}

/// [`watch`] of `guard` (a read hold, or any hold beside which no writer may be let in):
/// `probe` inspects the lock, `rival` tries to write.
pub async fn watch_writers<K: redis_locks::kind::Kind>(
    what: &str,
    guard: &redis_locks::Guard<K>,
    probe: &redis_locks::RwLock,
    rival: &redis_locks::RwLock,
    how_long: Duration,
) {
    watch(
        what,
        || guard.is_held(),
        || guard.valid_until(),
        async || probe.inspect().await.expect("inspect"),
        async || took(rival.try_write().await).await,
        how_long,
    )
    .await;
}

/// A's guard from its spawned acquire (`lock()`, `read()`, ...), within 20 s.
pub async fn a_granted<G>(task: tokio::task::JoinHandle<redis_locks::Result<G>>) -> G {
    tokio::time::timeout(crate::time::secs(20), task)
        .await
        .expect("A granted within 20 s")
        .expect("task")
        .expect("A's acquire")
}

/// The guard `task` is granted, which must come within 2 s of `released`: `who` was woken by
/// Redis, not by its polling interval (4.8-6 s).
pub async fn woken_after<G>(
    task: tokio::task::JoinHandle<redis_locks::Result<G>>,
    released: tokio::time::Instant,
    who: &str,
) -> G {
    let g = a_granted(task).await;
    let waited = released.elapsed();
    eprintln!("{who} granted {waited:?} after the release");
    assert!(
        waited < crate::time::secs(2),
        "{who} was granted {waited:?} after the release: its wake-up was lost (it slept until \
         its polling interval, 4.8-6 s)"
    );
    g
}

/// A quorum-mode client of the servers at `urls`, with `response_timeout` (and a 500 ms
/// connect timeout) if given, else the defaults.
pub async fn quorum_client(urls: &[String], response_timeout: Option<Duration>) -> LockClient {
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut builder = LockClient::builder();
    if let Some(response_timeout) = response_timeout {
        builder = builder.redis_config(redis_locks::RedisConfig {
            response_timeout,
            connect_timeout: ms(500),
            ..redis_locks::RedisConfig::default()
        });
    }
    builder
        .quorum(&urls)
        .await
        .expect("a quorum client connects")
}

/// One lock and release of the Mutex `name` by `a` (the scripts are on the server then).
pub async fn warm_up(a: &LockClient, name: &str) {
    let g = a.mutex(name).lock().await.expect("warm-up");
    g.release().await.expect("release");
}

/// A multi-lock on `{prefix}:w1` and `{prefix}:w2` taken and released by `a`: its scripts are
/// on the server.
pub async fn warm_up_multi(a: &LockClient, prefix: &str) {
    let names = [format!("{prefix}:w1"), format!("{prefix}:w2")];
    let g = a.multi_lock(&names).lock().await.expect("warm-up");
    g.release().await.expect("release");
}

/// Three redis-servers, the first two behind a [`late_proxy::LateProxy`] each: the servers,
/// the proxies, the servers' own URLs and the URLs through the proxies (servers 0 and 1
/// proxied, server 2 direct).
pub async fn two_of_three_late() -> (
    Vec<crate::RedisServer>,
    [late_proxy::LateProxy; 2],
    Vec<String>,
    Vec<String>,
) {
    let servers: Vec<crate::RedisServer> = (0..3).map(|_| crate::RedisServer::start()).collect();
    let p0 = late_proxy::LateProxy::start(servers[0].port()).await;
    let p1 = late_proxy::LateProxy::start(servers[1].port()).await;
    let direct = servers.iter().map(crate::RedisServer::url).collect();
    let via = vec![p0.url(), p1.url(), servers[2].url()];
    (servers, [p0, p1], direct, via)
}

/// The clients of a watch: one reads the server (`observer`), one contends (`contender`).
pub struct Watchers {
    pub observer: LockClient,
    pub contender: LockClient,
}

impl Watchers {
    /// Two new clients of `b`.
    pub async fn on(b: &Backend) -> Watchers {
        Watchers {
            observer: b.client().await,
            contender: b.client().await,
        }
    }

    /// [`watch_mutex`] of `guard` on `name` with these clients.
    pub async fn mutex(
        &self,
        what: &str,
        guard: &redis_locks::Guard<redis_locks::kind::Mutex>,
        name: &str,
        how_long: Duration,
    ) {
        watch_mutex(what, guard, &self.observer, &self.contender, name, how_long).await
    }
}

/// [`watch`] of a Mutex guard, `contender` trying the lock.
pub async fn watch_mutex(
    what: &str,
    guard: &redis_locks::Guard<redis_locks::kind::Mutex>,
    observer: &LockClient,
    contender: &LockClient,
    name: &str,
    how_long: Duration,
) {
    let (probe, rival) = (observer.mutex(name), contender.mutex(name));
    watch(
        what,
        || guard.is_held(),
        || guard.valid_until(),
        async || probe.inspect().await.expect("inspect"),
        async || took(rival.try_lock().await).await,
        how_long,
    )
    .await;
}

/// The fence of a contender's try if it was granted (released at once), else `None`.
pub async fn took<K: redis_locks::kind::Kind>(
    tried: redis_locks::Result<redis_locks::Guard<K>>,
) -> Option<u64> {
    let g = tried.granted("contender's try")?;
    let fence = g.fencing_token();
    let _ = g.release().await;
    Some(fence)
}

/// A TCP proxy that can hold a connection's requests and cut its client side while keeping
/// the server side, so held requests reach the server after the client reconnected. New
/// connections can start held (`hold_new`), and the chunks read while held are logged
/// (`held_log`), so a test can wait for a given request.
pub mod late_proxy {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{mpsc, watch};
    use tokio::task::AbortHandle;

    struct Conn {
        held: watch::Sender<bool>,
        client_side: Mutex<Vec<AbortHandle>>,
    }

    type Pred = Arc<Mutex<Option<Box<dyn Fn(&str) -> bool + Send + Sync>>>>;

    pub struct LateProxy {
        port: u16,
        conns: Arc<Mutex<Vec<Arc<Conn>>>>,
        queued: Arc<AtomicUsize>,
        hold_new: Arc<AtomicBool>,
        log: Arc<Mutex<Vec<String>>>,
        hold_when: Pred,
        accept: AbortHandle,
    }

    impl LateProxy {
        pub async fn start(upstream: u16) -> LateProxy {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = listener.local_addr().expect("addr").port();
            let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
            let queued = Arc::new(AtomicUsize::new(0));
            let hold_new = Arc::new(AtomicBool::new(false));
            let log: Arc<Mutex<Vec<String>>> = Arc::default();
            let hold_when: Pred = Arc::default();
            let (c2, q2, h2, l2) = (conns.clone(), queued.clone(), hold_new.clone(), log.clone());
            let w2 = hold_when.clone();
            let accept = tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let conn = Arc::new(Conn {
                        held: watch::channel(h2.load(Ordering::SeqCst)).0,
                        client_side: Mutex::default(),
                    });
                    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
                    let q = q2.clone();
                    let l = l2.clone();
                    let held_now = conn.held.subscribe();
                    let (hold_it, w) = (conn.clone(), w2.clone());
                    let reader = tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                                    let matches =
                                        w.lock().unwrap().as_ref().is_some_and(|p| p(&text));
                                    if matches {
                                        hold_it.held.send_replace(true);
                                    }
                                    if *held_now.borrow() {
                                        l.lock()
                                            .unwrap()
                                            .push(String::from_utf8_lossy(&buf[..n]).into_owned());
                                    }
                                    q.fetch_add(n, Ordering::SeqCst);
                                    if tx.send(buf[..n].to_vec()).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                    });
                    let mut held = conn.held.subscribe();
                    let q = q2.clone();
                    tokio::spawn(async move {
                        while let Some(bytes) = rx.recv().await {
                            if held.wait_for(|h| !*h).await.is_err() {
                                break;
                            }
                            if sw.write_all(&bytes).await.is_err() {
                                break;
                            }
                            q.fetch_sub(bytes.len(), Ordering::SeqCst);
                        }
                        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                        drop(sw);
                    });
                    let writer = tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if cw.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                    });
                    conn.client_side
                        .lock()
                        .unwrap()
                        .extend([reader.abort_handle(), writer.abort_handle()]);
                    c2.lock().unwrap().push(conn);
                }
            })
            .abort_handle();
            LateProxy {
                port,
                conns,
                queued,
                hold_new,
                log,
                hold_when,
                accept,
            }
        }

        /// From now on, a connection whose client sends a chunk matching `pred` is held from
        /// that chunk on (it and everything after it).
        pub fn hold_when(&self, pred: impl Fn(&str) -> bool + Send + Sync + 'static) {
            *self.hold_when.lock().unwrap() = Some(Box::new(pred));
        }

        /// Stops holding connections on a match (those held stay held).
        pub fn hold_when_off(&self) {
            *self.hold_when.lock().unwrap() = None;
        }

        pub fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/", self.port)
        }

        /// Holds the requests of every connection open now.
        pub fn hold_existing(&self) {
            for c in self.conns.lock().unwrap().iter() {
                c.held.send_replace(true);
            }
        }

        /// Whether connections opened from now on start held.
        pub fn hold_new(&self, hold: bool) {
            self.hold_new.store(hold, Ordering::SeqCst);
        }

        /// Bytes read from clients and not yet delivered to the server.
        pub fn queued(&self) -> usize {
            self.queued.load(Ordering::SeqCst)
        }

        /// The chunks read while their connection was held, in order.
        pub fn held_log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }

        /// Cuts the client side of every connection open now; their held requests stay.
        pub fn cut_clients(&self) {
            for c in self.conns.lock().unwrap().iter() {
                for h in c.client_side.lock().unwrap().drain(..) {
                    h.abort();
                }
            }
        }

        /// Delivers everything held.
        pub fn deliver(&self) {
            for c in self.conns.lock().unwrap().iter() {
                c.held.send_replace(false);
            }
        }

        /// Delivers everything held and waits (10 s at most) until it left.
        pub async fn deliver_all(&self) {
            self.deliver();
            let (limit, what) = (crate::time::secs(10), "the held claim was never delivered");
            super::until(what, limit, || self.queued() == 0).await;
        }

        /// Waits up to `limit` for a held request (the [`LateProxy::hold_when`] match), then
        /// stops holding on a match; whether one was held.
        pub async fn held_within(&self, limit: std::time::Duration) -> bool {
            let give_up = tokio::time::Instant::now() + limit;
            while self.held_log().is_empty() && tokio::time::Instant::now() < give_up {
                tokio::time::sleep(crate::time::ms(1)).await;
            }
            self.hold_when_off();
            !self.held_log().is_empty()
        }

        /// Holds a connection from its first lease request (`arity` RESP words of the plain
        /// form a single server runs: 13 for a Mutex's or writer's, 17 for a fair RwLock's)
        /// of `name` that names a hand-off
        /// deadline (not "keep"): a hand-off's claim.
        pub fn hold_claim(&self, arity: usize, name: &str) {
            let (start, tag) = (format!("*{arity}\r\n$7\r\nEVALSHA"), format!("{{{name}}}"));
            self.hold_when(move |chunk| {
                chunk.starts_with(&start) && chunk.contains(&tag) && !chunk.ends_with("keep\r\n")
            });
        }
    }

    impl Drop for LateProxy {
        fn drop(&mut self) {
            self.accept.abort();
            self.cut_clients();
        }
    }
}

/// A client of redis-server `b` through a new [`late_proxy::LateProxy`], with 300 ms response
/// timeouts ([`crate::proxy::quick`]: a held request soon counts as lost, and the client
/// reconnects).
pub async fn proxied_client(b: &Backend) -> (late_proxy::LateProxy, LockClient) {
    let port = b.server.as_ref().expect("server").port();
    let proxy = late_proxy::LateProxy::start(port).await;
    let a = LockClient::builder()
        .redis_config(crate::proxy::quick())
        .connect(&proxy.url())
        .await
        .expect("A connects through the proxy");
    (proxy, a)
}

/// A client of (fresh) redis-server `b` through a new [`late_proxy::LateProxy`], wrapped in
/// a [`Faulty`] (to stop its process), with 300 ms response timeouts.
pub async fn proxied_faulty_client(
    b: &Backend,
) -> (late_proxy::LateProxy, Arc<Faulty>, LockClient) {
    let port = b.server.as_ref().expect("server").port();
    let proxy = late_proxy::LateProxy::start(port).await;
    let store = RedisStore::connect_with(&proxy.url(), crate::proxy::quick())
        .await
        .expect("a store through the proxy");
    let f = Faulty::new(Arc::new(store));
    let c = LockClient::builder().store(f.clone()).expect("client");
    (proxy, f, c)
}

/// Polls `cond` every ms for up to `limit`; panics with `what` if it never holds.
pub async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < give_up, "{what}");
        tokio::time::sleep(ms(1)).await;
    }
}
