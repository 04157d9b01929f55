//! An `extend` of a hold a release handed over: until the hand-off's claim is confirmed, an
//! extend is the claim too (docs/decisions/no-request-shortens-a-hold.md), through the public
//! API only. Each test fails if a promise of `docs/GUARANTEES.md` breaks:
//! never two holders of an exclusive lock while both guards say `is_held()`, a guard never
//! trusts past the server's lease, a dead holder blocks others at most one lease.

mod support;
use support::faulty::at_gate;

use std::sync::{Arc, Mutex};

use redis_locks::LockClient;
use tokio::time::Instant;

use support::backend::{until_waiters, Backend};
use support::faulty::{Op, Rule};
use support::late::{a_granted, late_proxy, proxied_faulty_client, until, warm_up, Watchers};
use support::time::{ms, secs};

/// An `rw_extend` (its plain form on a single server: `EVALSHA`, the hash, 6 and six keys, and
/// its four arguments).
fn is_lease_request(chunk: &str, name: &str) -> bool {
    chunk.starts_with("*13\r\n$7\r\nEVALSHA") && chunk.contains(&format!("{{{name}}}"))
}

/// Hand the Mutex `name` to A (lease 300 ms, heartbeat 2 s) with A's claim held on the
/// proxy. Returns A's guard, or None if A was granted by its own attempt (no claim).
async fn handed_with_held_claim(
    proxy: &late_proxy::LateProxy,
    a: &LockClient,
    holder: &LockClient,
    observer: &LockClient,
    name: &str,
) -> Option<redis_locks::Guard<redis_locks::kind::Mutex>> {
    proxy.hold_claim(13, name);
    let x = holder.mutex(name).lock().await.expect("X locks");
    let a_handle = a.mutex(name).lease(ms(300)).heartbeat(secs(2));
    let waiting = tokio::spawn(async move { a_handle.lock().await });
    let probe = observer.mutex(name);
    until_waiters(1, || probe.inspect()).await;
    assert!(x.release().await.expect("X releases"));
    let a_guard = a_granted(waiting).await;
    if !proxy.held_within(secs(2)).await {
        a_guard.release().await.expect("release");
        return None;
    }
    Some(a_guard)
}

/// The claim's outcome is unknown; A extends to 5 s (longer than the 2 s window):
/// the extend is the claim and sets now + 5 s. A's trust is checked against the server,
/// then A detaches and B resumes with 400 ms; then A's late claim lands. B must never see a
/// second holder while it says is_held(), nor trust past the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_longer_extend_during_an_unknown_claim_then_a_resume_then_the_late_claim() {
    let b = Backend::redis();
    let (proxy, _fa, a) = proxied_faulty_client(&b).await;
    let holder = b.client().await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;
    warm_up(&a, "ext-claim-1-warm").await;
    for round in 0..4 {
        let name = format!("ext-claim-longer-{round}");
        let Some(mut a_guard) =
            handed_with_held_claim(&proxy, &a, &holder, &w.observer, &name).await
        else {
            continue;
        };
        eprintln!("held claim: {:?}", proxy.held_log());
        let (extended, ()) = tokio::join!(a_guard.extend(secs(5)), async {
            tokio::time::sleep(ms(20)).await;
            proxy.cut_clients();
        });
        assert!(
            extended.expect("extend"),
            "extend(5 s) after the unknown claim"
        );
        let info = w.observer.mutex(&name).inspect().await.expect("inspect");
        eprintln!("after extend: {info:?}");
        // A's own trust against the server while the claim is still in limbo.
        w.mutex("A after its extend-as-claim", &a_guard, &name, ms(400))
            .await;
        let id = a_guard.detach();
        let b_lock = resumer.mutex(&name).lease(ms(400));
        let b_guard = b_lock.resume(&id).await.expect("B resumes");
        assert!(b_guard.is_held());
        proxy.deliver_all().await;
        let info = w.observer.mutex(&name).inspect().await.expect("inspect");
        eprintln!("after late claim: {info:?}");
        w.mutex("B after A's late claim", &b_guard, &name, secs(2))
            .await;
        return;
    }
    panic!("every waiter was granted by its own attempt");
}

/// The late claim and the late extend in the other order. The claim's outcome is unknown
/// (held on the proxy, connection cut); A's extend (9 s, longer than the window) is held in
/// A's store and its call cancelled; A detaches, B resumes with 400 ms; then the late claim
/// lands first, then the late extend (which names the same hand-off deadline). B's hold is
/// not cut, and B's trust stays within the server's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_late_claim_then_the_late_extend_after_a_resume_cannot_cut_it() {
    let b = Backend::redis();
    let (proxy, fa, a) = proxied_faulty_client(&b).await;
    let holder = b.client().await;
    let resumer = b.client().await;
    let w = Watchers::on(&b).await;
    warm_up(&a, "ext-claim-2-warm").await;
    for round in 0..4 {
        let name = format!("ext-claim-order-{round}");
        let Some(mut a_guard) =
            handed_with_held_claim(&proxy, &a, &holder, &w.observer, &name).await
        else {
            continue;
        };
        // The next lease request of A (a renewal or the extend; either carries the claim)
        // is held in A's store.
        let gate = fa.hold_requests(Rule::on(Op::Extend).times(1));
        proxy.cut_clients();
        let _ = tokio::time::timeout(ms(150), a_guard.extend(secs(9))).await;
        at_gate(&gate, 1, "A's next lease request reached the gate").await;
        let id = a_guard.detach();
        let b_lock = resumer.mutex(&name).lease(ms(400));
        let b_guard = b_lock.resume(&id).await.expect("B resumes");
        assert!(b_guard.is_held());
        proxy.deliver_all().await;
        tokio::time::sleep(ms(30)).await;
        eprintln!(
            "after late claim: {:?}",
            w.observer.mutex(&name).inspect().await
        );
        gate.open();
        tokio::time::sleep(ms(100)).await;
        eprintln!(
            "after late extend: {:?}",
            w.observer.mutex(&name).inspect().await
        );
        let what = "B after the late claim and extend";
        w.mutex(what, &b_guard, &name, secs(2)).await;
        return;
    }
    panic!("every waiter was granted by its own attempt");
}

/// The claim is confirmed, then A extends: the extend must no longer carry the
/// hand-off's deadline (every lease request after a confirmed claim says "keep"), and a
/// dead A afterwards blocks others at most about one lease of the extend.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extend_after_a_confirmed_claim_carries_no_stale_deadline() {
    let b = Backend::redis();
    let (proxy, fa, a) = proxied_faulty_client(&b).await;
    let holder = b.client().await;
    let w = Watchers::on(&b).await;
    let name = "ext-claim-confirmed";
    let tap: Arc<Mutex<Vec<String>>> = Arc::default();
    let (t2, n2) = (tap.clone(), name.to_string());
    proxy.hold_when(move |chunk| {
        if is_lease_request(chunk, &n2) {
            t2.lock().unwrap().push(chunk.to_string());
        }
        false
    });
    let x = holder.mutex(name).lock().await.expect("X locks");
    let a_handle = a.mutex(name).lease(ms(300)).heartbeat(secs(2));
    let waiting = tokio::spawn(async move { a_handle.lock().await });
    let probe = w.observer.mutex(name);
    until_waiters(1, || probe.inspect()).await;
    assert!(x.release().await.expect("X releases"));
    let mut a_guard = a_granted(waiting).await;
    until("no claim sent", secs(3), || {
        tap.lock().unwrap().iter().any(|c| !c.ends_with("keep\r\n"))
    })
    .await;
    tokio::time::sleep(ms(100)).await;
    assert!(a_guard.is_held());
    let before = tap.lock().unwrap().len();
    assert!(a_guard.extend(ms(300)).await.expect("extend"));
    let after: Vec<String> = tap.lock().unwrap()[before..].to_vec();
    eprintln!("claim etc: {:?}", &tap.lock().unwrap()[..before]);
    eprintln!("after confirm: {after:?}");
    assert!(!after.is_empty(), "no lease request seen for the extend");
    assert!(
        after.iter().all(|c| c.ends_with("keep\r\n")),
        "a lease request after the confirmed claim still names a hand-off deadline: {after:?}"
    );
    w.mutex("A after extend", &a_guard, name, ms(500)).await;
    fa.freeze().await;
    let frozen = Instant::now();
    let rival = w.contender.mutex(name);
    loop {
        if let Ok(g) = rival.try_lock().await {
            let _ = g.release().await;
            break;
        }
        assert!(
            frozen.elapsed() < ms(300) + ms(700),
            "dead A blocked others for {:?} (lease 300 ms): {:?}",
            frozen.elapsed(),
            probe.inspect().await
        );
        tokio::time::sleep(ms(20)).await;
    }
    eprintln!("freed {:?}", frozen.elapsed());
    drop(a_guard);
}
