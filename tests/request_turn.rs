//! A hold's turn for lease requests, waited for with a bound: what a request that gave up
//! waiting leaves behind, through the public API on both backends.

mod support;
use support::faulty::faulty_client;

use tokio::time::{sleep, timeout, Instant};

use support::backend::Backend;
use support::faulty::{Gate, Op, Rule};
use support::honest::{assert_honest, server_deadline};
use support::time::{current_thread, ms, secs};

/// Claim: an `extend` that timed out waiting for its turn (behind a renewal parked on an idle
/// runtime; nothing sent, `Error::Timeout`) changes nothing: the later renewals ask for the
/// lease the hold had, not the timed-out extend's.
async fn a_timed_out_extend_is_applied_later_by_renewals(b: Backend) {
    let name = "turn-extend-timed-out-applied";
    let (f, c) = faulty_client(&b).await;
    let other = b.client().await;
    let gate = Gate::new();
    f.add(
        Rule::on(Op::Extend)
            .when(|call| call.lease == Some(secs(20)))
            .times(1)
            .hold_request(gate.clone()),
    );
    let (c2, gate2) = (c.clone(), gate.clone());
    let (idle, mut guard) = tokio::task::spawn_blocking(move || {
        let rt = current_thread();
        let guard = rt.block_on(async move {
            let guard = c2.mutex(name).lease(secs(20)).lock().await.expect("lock");
            timeout(ms(15_000), gate2.wait_entered(1))
                .await
                .expect("the renewal at the gate");
            guard
        });
        (rt, guard)
    })
    .await
    .expect("runtime A");
    let ext = timeout(ms(15_000), guard.extend(secs(60)))
        .await
        .expect("extend ends within its bound");
    let ext_s = format!("{ext:?}");
    assert!(
        matches!(&ext, Err(e) if e.is_timeout()),
        "[{}] extend behind a parked renewal said {ext_s}",
        b.kind
    );
    // Let runtime A go on: the parked renewal is answered, the next renewal follows.
    gate.open();
    let driver = tokio::task::spawn_blocking(move || {
        idle.block_on(sleep(ms(16_000)));
        idle
    });
    let started = Instant::now();
    let mut worst = std::time::Duration::ZERO;
    while started.elapsed() < ms(15_000) {
        let until = guard.valid_until();
        let info = other.mutex(name).inspect().await.expect("inspect");
        let answered = Instant::now();
        if guard.is_held() {
            assert_honest("[turn] after a timed-out extend", until, &info, answered);
        }
        if let Some(d) = server_deadline(&info, answered) {
            worst = worst.max(d.saturating_duration_since(answered));
        }
        if worst > secs(25) {
            break;
        }
        sleep(ms(250)).await;
    }
    let held = guard.is_held();
    drop(guard.detach());
    let idle = driver.await.expect("driver");
    tokio::task::spawn_blocking(move || drop(idle))
        .await
        .expect("drop runtime A");
    let _ = other.force_release(name).await;
    assert!(
        worst <= secs(21),
        "[{}] extend(60 s) returned {ext_s} (it waited for its turn and was never sent), yet \
         the server later held the lease for {worst:?} ahead: the renewals asked for the \
         timed-out extend's length (guard is_held {held})",
        b.kind
    );
}
both_backends!(a_timed_out_extend_is_applied_later_by_renewals);
