//! Renewals when the caller's side goes away: holds outlive their dropped `LockClient`, and a
//! hold granted on a tokio runtime that then shut down goes on being renewed by the client's
//! engine, on its own thread.
//!
//! Every test asserts a property through the public API: a guard never trusts past its server
//! lease, stops saying `is_held()` when nobody renews it, and a hold an `extend` put back in a
//! live schedule stays held and listed.

mod support;
use support::kinds::inspect;
use support::quick::Quick;

use tokio::time::{sleep, Instant};

use support::backend::Backend;
use support::honest::assert_honest;
use support::time::{current_thread, ms};

// ------------------------------------------------------------------------------------------
// the client dropped
// ------------------------------------------------------------------------------------------

/// Guards outlive their `LockClient` (and its handles): every primitive (lease 600 ms) is
/// still renewed 2.5 s later, listed by the server, and released with `Ok(true)`.
async fn holds_outlive_their_dropped_client(b: Backend) {
    let c = b.leased(ms(600)).await;
    let observer = b.client().await;
    let m = c.locked("renewal-shutdown-orphan-m").await;
    let f = c.fair_locked("renewal-shutdown-orphan-f").await;
    let p = c
        .semaphore("renewal-shutdown-orphan-s", 2)
        .acquire()
        .await
        .expect("permit");
    let r = c
        .rwlock("renewal-shutdown-orphan-r")
        .read()
        .await
        .expect("read");
    let w = c
        .rwlock("renewal-shutdown-orphan-w")
        .write()
        .await
        .expect("write");
    drop(c);
    sleep(ms(2_500)).await;
    let held = [
        m.is_held(),
        f.is_held(),
        p.is_held(),
        r.is_held(),
        w.is_held(),
    ];
    assert_eq!(
        held, [true; 5],
        "[{}] m, f, p, r, w after the client was dropped",
        b.kind
    );
    let mut listed = Vec::new();
    for (kind, x) in [
        ("mutex", "m"),
        ("fair", "f"),
        ("sem", "s"),
        ("read", "r"),
        ("write", "w"),
    ] {
        let name = format!("renewal-shutdown-orphan-{x}");
        listed.push(inspect(&observer, kind, &name).await.holders.len());
    }
    assert_eq!(listed, [1; 5], "[{}] server holders", b.kind);
    assert!(m.release().await.expect("release"));
    assert!(f.release().await.expect("release"));
    assert!(p.release().await.expect("release"));
    assert!(r.release().await.expect("release"));
    assert!(w.release().await.expect("release"));
}

both_backends!(holds_outlive_their_dropped_client);

// ------------------------------------------------------------------------------------------
// the granting runtime shut down
// ------------------------------------------------------------------------------------------

/// A hold granted on a runtime that then shut down (with a renewal in flight, or none) is
/// renewed all the same: the client's engine runs on a thread of its own. The guard stays
/// held and honest for four leases, the server lists it, and dropping the guard releases it.
#[test]
fn a_hold_outlives_the_runtime_that_granted_it() {
    let main = current_thread();
    let b = Backend::redis();
    let observer = main.block_on(b.client());
    let name = "rt-outlived";
    // The client and its guard are made on a runtime that ends right after.
    let (c, g) = std::thread::scope(|s| {
        s.spawn(|| {
            current_thread().block_on(async {
                let c = b.leased(ms(600)).await;
                let g = c.mutex(name).lock().await.expect("lock");
                (c, g)
            })
        })
        .join()
        .expect("thread")
    });
    main.block_on(async {
        let end = Instant::now() + ms(2_400);
        while Instant::now() < end {
            let until = g.valid_until();
            let info = observer.mutex(name).inspect().await.expect("inspect");
            assert_honest(name, until, &info, Instant::now());
            assert!(g.is_held(), "not renewed after its runtime ended");
            assert_eq!(info.holders.len(), 1, "held but not listed");
            sleep(ms(50)).await;
        }
    });
    drop(g);
    drop(c);
    main.block_on(async {
        let next = observer.mutex(name).try_lock().await;
        assert!(next.is_ok(), "the dropped guard was not released: {next:?}");
    });
}
