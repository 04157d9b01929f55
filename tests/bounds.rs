//! Compile-time checks: every handle, guard and public future is `Send` (and handles and the
//! client are `Sync`), so they work in spawned tasks. If this file compiles, the test passes;
//! the runtime part only makes sure it is built and run.

use std::time::Duration;

use redis_locks::{
    FairLock, FairLockGuard, LockClient, Mutex, MutexGuard, Permit, ReadGuard, RwLock, Semaphore,
    WriteGuard,
};

fn is_send<T: Send>(_: &T) {}
fn send_sync<T: Send + Sync + 'static>() {}
fn send_static<T: Send + 'static>() {}

#[test]
fn handles_guards_and_futures_are_send() {
    send_sync::<LockClient>();
    send_sync::<Mutex>();
    send_sync::<RwLock>();
    send_sync::<FairLock>();
    send_sync::<Semaphore>();
    send_sync::<redis_locks::Error>();
    send_static::<MutexGuard>();
    send_static::<ReadGuard>();
    send_static::<WriteGuard>();
    send_static::<FairLockGuard>();
    send_static::<Permit>();

    let client = LockClient::in_memory();
    let (m, rw, f, s) = (
        client.mutex("a"),
        client.rwlock("b"),
        client.fair_lock("c"),
        client.semaphore("d", 2),
    );
    let d = Duration::from_secs(1);
    is_send(&m.lock());
    is_send(&m.try_lock());
    is_send(&m.lock().timeout(d));
    is_send(&m.with_lock(|_| async {}));
    is_send(&rw.read());
    is_send(&rw.write());
    is_send(&rw.try_read());
    is_send(&rw.try_write());
    is_send(&rw.read().timeout(d));
    is_send(&rw.write().timeout(d));
    is_send(&f.lock());
    is_send(&f.lock().on_position(|_| {}));
    is_send(&f.try_lock());
    is_send(&s.acquire());
    is_send(&s.acquire_many(2));
    is_send(&s.try_acquire());
    is_send(&LockClient::connect("redis://127.0.0.1:1/"));
    is_send(&client.force_release("a"));
    let limiter = client.rate_limiter("e", redis_locks::Rate::per_second(5));
    send_sync::<redis_locks::RateLimiter>();
    is_send(&limiter.acquire(1));
    is_send(&limiter.acquire(1).timeout(d));
    is_send(&limiter.try_acquire(1));
    is_send(&limiter.inspect());
}

#[tokio::test]
async fn guard_futures_are_send() {
    let client = LockClient::in_memory();
    let mut guard = client.mutex("g").lock().await.expect("lock");
    is_send(&guard.lost());
    is_send(&guard.extend(Duration::from_secs(1)));
    let fut = WriteGuard::downgrade(client.rwlock("h").write().await.expect("write"));
    is_send(&fut);
    let read = fut.await.expect("downgrade");
    // A guard moves into a spawned task.
    let handle = tokio::spawn(async move { guard.release().await });
    assert!(handle.await.expect("task").expect("release"));
    assert!(read.release().await.expect("release"));
}
