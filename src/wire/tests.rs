//! Round trips of every wire format, and the parsers' refusals of malformed replies.

use super::*;

// ---- encoders of what the scripts write, for round trips ----------------------------

fn int_v(i: i64) -> Value {
    Value::Int(i)
}

fn text_v(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn opt_v(o: Option<u64>) -> Value {
    o.map_or(int_v(-1), |n| int_v(n as i64))
}

/// What `rw_acquire.lua` and `queue_acquire.lua` return for `reply`.
fn acquire_value(reply: &Acquire) -> Value {
    match *reply {
        Acquire::Granted(g) => int_v(g.fence as i64),
        Acquire::Busy(b) => Value::Array(vec![
            int_v(0),
            opt_v(b.retry_after.map(ms)),
            opt_v(b.position),
            opt_v(b.heartbeat_until),
        ]),
    }
}

/// What `rw_inspect.lua` returns for a lease-lock snapshot.
fn lease_view_value(s: &Snapshot) -> Value {
    let (writer, left) = s
        .holders
        .iter()
        .find(|h| h.kind == HoldKind::Write)
        .map_or(("", 0), |h| (h.token.as_str(), h.remaining_ms));
    let readers = s
        .holders
        .iter()
        .filter(|h| h.kind == HoldKind::Read)
        .flat_map(|h| [text_v(&h.token), int_v(h.remaining_ms as i64)])
        .collect();
    let waiting = s
        .waiters
        .iter()
        .flat_map(|w| [text_v(&w.token), int_v(w.heartbeat_remaining_ms as i64)])
        .collect();
    Value::Array(vec![
        int_v(s.now_ms as i64),
        int_v(s.fence as i64),
        text_v(writer),
        int_v(left as i64),
        Value::Array(readers),
        Value::Array(waiting),
    ])
}

/// What `queue_inspect.lua` returns for a ticket-queue snapshot.
fn queue_view_value(s: &Snapshot) -> Value {
    let holders = s
        .holders
        .iter()
        .flat_map(|h| {
            let HoldKind::Permits(weight) = h.kind else {
                panic!("a ticket holder holds permits")
            };
            let m = Member {
                token: &h.token,
                weight,
            };
            [text_v(&m.to_string()), int_v(h.remaining_ms as i64)]
        })
        .collect();
    let waiters = s
        .waiters
        .iter()
        .flat_map(|w| {
            let m = Member {
                token: &w.token,
                weight: w.weight,
            };
            [
                text_v(&m.to_string()),
                int_v(w.ticket as i64),
                int_v(w.heartbeat_remaining_ms as i64),
            ]
        })
        .collect();
    Value::Array(vec![
        int_v(s.now_ms as i64),
        int_v(s.fence as i64),
        opt_v(s.permits.map(u64::from)),
        Value::Array(holders),
        Value::Array(waiters),
        int_v(i64::from(s.foreign_capacity)),
    ])
}

fn args(a: impl ToRedisArgs) -> Vec<String> {
    let n = a.num_of_args();
    let out: Vec<String> = a
        .to_redis_args()
        .into_iter()
        .map(|b| String::from_utf8(b).expect("utf-8 argument"))
        .collect();
    assert_eq!(out.len(), n, "num_of_args of {out:?}");
    out
}

// ---- decoders of the arguments, as the scripts read them ----------------------------

/// `queue_common.lua`'s `capacity_for`: `=` for a fixed capacity, then the count.
fn capacity_of(arg: &str) -> Capacity {
    let (fixed, n) = match arg.strip_prefix('=') {
        Some(n) => (true, n),
        None => (false, arg),
    };
    Capacity {
        permits: n.parse().expect("capacity count"),
        resizable: !fixed,
    }
}

/// `queue_set_permits.lua`'s reading of `ARGV[3]` and `ARGV[4]`.
fn change_of(op_n: &str, base: &str) -> PermitChange {
    let (op, n) = op_n.split_at(1);
    let (n, base) = (n.parse().expect("n"), base.parse().expect("base"));
    match op {
        "=" => PermitChange::Set(n),
        "+" => PermitChange::Add { by: n, base },
        "-" => PermitChange::Forget { by: n, base },
        other => panic!("unknown op {other}"),
    }
}

fn claim(slot: Slot, policy: Policy) -> Claim {
    Claim {
        token: "tok-1".to_owned(),
        slot,
        lease: Duration::from_micros(1_500_700),
        heartbeat: Duration::from_millis(250),
        policy,
    }
}

// ---- round trips -------------------------------------------------------------------

#[test]
fn member_round_trip() {
    for (token, weight) in [("a", 1), ("tok_-9", 2), ("x", 1 << 30), ("7", u32::MAX)] {
        let m = Member { token, weight };
        let text = m.to_string();
        assert_eq!(Member::parse(&text), Some(m), "{text}");
    }
    assert_eq!(
        Member {
            token: "t",
            weight: 1
        }
        .to_string(),
        "t"
    );
    assert_eq!(
        Member {
            token: "t",
            weight: 3
        }
        .to_string(),
        "t#3"
    );
    // As weight_of/token_of in queue_common.lua read them.
    assert_eq!(
        Member::parse("a#b"),
        Some(Member {
            token: "a#b",
            weight: 1
        })
    );
    assert_eq!(
        Member::parse("a#"),
        Some(Member {
            token: "a#",
            weight: 1
        })
    );
    assert_eq!(Member::parse("a#99999999999"), None);
}

#[test]
fn wake_up_round_trip() {
    assert_eq!(WakeUp::All.to_string(), "*");
    assert_eq!(WakeUp::parse("*"), WakeUp::All);
    let grants = WakeUp::Named(vec![
        Named::granted(
            "tokA",
            HandOff {
                fence: 7,
                until: Some(1_000_250),
            },
        ),
        Named::granted(
            "tokB",
            HandOff {
                fence: 7,
                until: Some(0),
            },
        ),
    ]);
    let text = grants.to_string();
    assert_eq!(text, "tokA=7@1000250 tokB=7@0");
    assert_eq!(WakeUp::parse(&text), grants);
    let bare = WakeUp::Named(vec![
        Named {
            token: "plain".into(),
            grant: None,
        },
        Named {
            token: "fenced".into(),
            grant: Some(HandOff {
                fence: 3,
                until: None,
            }),
        },
    ]);
    assert_eq!(bare.to_string(), "plain fenced=3");
    assert_eq!(WakeUp::parse(&bare.to_string()), bare);
    // A grant that does not parse still names its waiter.
    assert_eq!(
        WakeUp::parse("t=x@1"),
        WakeUp::Named(vec![Named {
            token: "t".into(),
            grant: None
        }])
    );
    assert_eq!(WakeUp::parse(""), WakeUp::Named(vec![]));
}

#[test]
fn prelude_arguments() {
    let argv = Argv {
        now: Now(None),
        publish: Publish::Plain,
        step: NoArgs,
    };
    assert_eq!(args(argv), ["", "PUBLISH"]);
    let argv = Argv {
        now: Now(Some(1_700_000_000_123)),
        publish: Publish::Sharded,
        step: RaiseFenceArgs {
            fence: 42,
            keep: Ms(Duration::from_millis(1500)),
        },
    };
    assert_eq!(args(argv), ["1700000000123", "SPUBLISH", "42", "1500"]);
}

#[test]
fn small_argument_values_round_trip() {
    for (slot, text) in [(Slot::Write, "w"), (Slot::Read, "r")] {
        assert_eq!(args(Mode::of(slot)), [text]);
    }
    assert_eq!(args(PolicyArg(Policy::Writer)), ["writer"]);
    assert_eq!(args(PolicyArg(Policy::Reader)), ["reader"]);
    for b in [true, false] {
        // queue_acquire.lua: `== '1'`; rw_release.lua: `~= '0'`.
        assert_eq!(args(Wait(b))[0] == "1", b);
        assert_eq!(args(HandOver(b))[0] != "0", b);
    }
    assert_eq!(args(Ms(Duration::from_micros(1_999))), ["1"]);
    for capacity in [
        Capacity {
            permits: 5,
            resizable: true,
        },
        Capacity {
            permits: 1 << 30,
            resizable: false,
        },
    ] {
        assert_eq!(capacity_of(&args(capacity)[0]), capacity);
    }
    for change in [
        PermitChange::Set(4),
        PermitChange::Add { by: 2, base: 5 },
        PermitChange::Forget {
            by: u32::MAX,
            base: MAX_PERMITS,
        },
    ] {
        let a = args(Change(change));
        assert_eq!(change_of(&a[0], &a[1]), change, "{a:?}");
    }
}

#[test]
fn script_arguments_in_argv_order() {
    let writer = claim(Slot::Write, Policy::Writer);
    assert_eq!(
        args(RwAcquireArgs::new(&writer, true)),
        ["tok-1", "w", "1500", "writer", "1", "250"]
    );
    let reader = claim(Slot::Read, Policy::Reader);
    assert_eq!(
        args(RwAcquireArgs::new(&reader, false)),
        ["tok-1", "r", "1500", "reader", "0", "250"]
    );
    assert_eq!(
        args(RwExtendArgs::new(
            &reader,
            Duration::from_secs(2),
            Renewal::Keep
        )),
        ["tok-1", "2000", "r", "keep"]
    );
    assert_eq!(
        args(RwReleaseArgs {
            token: "tok-1",
            hand_over: HandOver(false)
        }),
        ["tok-1", "0"]
    );
    assert_eq!(
        args(RwDowngradeArgs {
            token: "tok-1",
            lease: Ms(writer.lease)
        }),
        ["tok-1", "1500"]
    );
    let sem = claim(
        Slot::Ticket {
            weight: 2,
            capacity: 5,
            resizable: true,
        },
        Policy::Writer,
    );
    assert_eq!(
        args(QueueAcquireArgs::new(&sem, true)),
        ["tok-1", "2", "1500", "250", "5", "1"]
    );
    assert_eq!(
        args(QueueReleaseArgs::new(&sem)),
        ["tok-1", "2", "250", "5"]
    );
    assert_eq!(
        args(QueueExtendArgs::new(
            &sem,
            Duration::from_millis(900),
            Renewal::Keep
        )),
        ["tok-1", "2", "900", "keep"]
    );
    let fair_writer = claim(
        Slot::Ticket {
            weight: 1 << 30,
            capacity: 1 << 30,
            resizable: false,
        },
        Policy::Writer,
    );
    assert_eq!(
        args(QueueDowngradeArgs::new(&fair_writer)),
        ["tok-1", "1073741824", "1500", "250", "=1073741824"]
    );
    assert_eq!(
        args(SetPermitsArgs {
            change: Change(PermitChange::Forget { by: 1, base: 3 }),
            heartbeat: Ms(Duration::from_millis(100)),
        }),
        ["-1", "3", "100"]
    );
}

#[test]
fn acquire_reply_round_trip() {
    let replies = [
        Acquire::Granted(Grant {
            fence: 0,
            lease: Duration::from_millis(1500),
        }),
        Acquire::Granted(Grant {
            fence: 1 << 40,
            lease: Duration::from_millis(1),
        }),
        Acquire::Busy(Busy {
            retry_after: Some(Duration::from_millis(120)),
            position: None,
            heartbeat_until: Some(1_000_250),
            token_released: false,
        }),
        Acquire::Busy(Busy {
            retry_after: None,
            position: Some(0),
            heartbeat_until: None,
            token_released: false,
        }),
    ];
    for reply in replies {
        let lease = match reply {
            Acquire::Granted(g) => g.lease,
            Acquire::Busy(_) => Duration::from_secs(1),
        };
        let parsed = AcquireReply::from_redis_value(acquire_value(&reply));
        assert_eq!(parsed.map(|r| r.outcome(lease)), Ok(reply));
    }
}

#[test]
fn small_replies_round_trip() {
    for fence in [None, Some(0), Some(9)] {
        let v = Value::Array(vec![
            int_v(fence.is_some().into()),
            int_v(fence.unwrap_or(0) as i64),
        ]);
        assert_eq!(
            DowngradeReply::from_redis_value(v),
            Ok(DowngradeReply(fence))
        );
    }
    for b in [true, false] {
        assert_eq!(Flag::from_redis_value(int_v(b.into())), Ok(Flag(b)));
    }
    assert_eq!(Fence::from_redis_value(int_v(12)), Ok(Fence(12)));
    for n in [1, MAX_PERMITS] {
        let v = int_v(n.into());
        assert_eq!(Permits::from_redis_value(v), Ok(Permits(n)));
    }
}

#[test]
fn inspect_replies_round_trip() {
    let holder = |token: &str, kind, remaining_ms| HolderState {
        token: token.to_owned(),
        kind,
        remaining_ms,
    };
    let waiter = |token: &str, weight, ticket, heartbeat_remaining_ms| WaiterState {
        token: token.to_owned(),
        weight,
        ticket,
        heartbeat_remaining_ms,
    };
    let lease = [
        Snapshot {
            now_ms: 1_000_000,
            fence: 4,
            permits: None,
            holders: vec![holder("w1", HoldKind::Write, 30)],
            waiters: vec![waiter("w2", 1, 0, 5), waiter("w3", 1, 0, 6)],
            foreign_capacity: false,
        },
        Snapshot {
            now_ms: 5,
            fence: 0,
            permits: None,
            holders: vec![
                holder("r1", HoldKind::Read, 1),
                holder("r2", HoldKind::Read, 2),
            ],
            waiters: vec![],
            foreign_capacity: false,
        },
    ];
    for s in lease {
        let parsed = LeaseLockView::from_redis_value(lease_view_value(&s));
        assert_eq!(parsed, Ok(LeaseLockView(s)));
    }
    let queue = [
        Snapshot {
            now_ms: 1_000_000,
            fence: 2,
            permits: Some(5),
            holders: vec![
                holder("a", HoldKind::Permits(1), 10),
                holder("b", HoldKind::Permits(3), 20),
            ],
            waiters: vec![waiter("c", 2, 1, 7), waiter("d", 1, 2, 8)],
            foreign_capacity: false,
        },
        Snapshot {
            now_ms: 0,
            fence: 0,
            permits: None,
            holders: vec![],
            waiters: vec![],
            foreign_capacity: false,
        },
        // A foreign `cap`: the holders are read beside it, the capacity unknown.
        Snapshot {
            now_ms: 7,
            fence: 3,
            permits: None,
            holders: vec![holder("e", HoldKind::Permits(2), 9)],
            waiters: vec![],
            foreign_capacity: true,
        },
    ];
    for s in queue {
        let parsed = TicketQueueView::from_redis_value(queue_view_value(&s));
        assert_eq!(parsed, Ok(TicketQueueView(s)));
    }
}

#[test]
fn malformed_replies_are_errors() {
    let bad = [
        Value::Nil,
        Value::Array(vec![int_v(2), int_v(1), int_v(1)]),
        Value::Array(vec![int_v(1), int_v(-3), int_v(1)]),
        Value::Array(vec![int_v(0), int_v(-2), int_v(-1), int_v(-1)]),
        Value::Array(vec![int_v(1), int_v(1)]),
        Value::Array(vec![text_v("x"), int_v(1), int_v(1)]),
        // The old grant table, and a negative fence.
        Value::Array(vec![int_v(1), int_v(7), int_v(1000)]),
        int_v(-1),
    ];
    for v in bad {
        assert!(AcquireReply::from_redis_value(v.clone()).is_err(), "{v:?}");
    }
    assert!(Flag::from_redis_value(int_v(2)).is_err());
    assert!(Fence::from_redis_value(int_v(-1)).is_err());
    assert!(Permits::from_redis_value(int_v(0)).is_err());
    assert!(Permits::from_redis_value(int_v(i64::from(MAX_PERMITS) + 1)).is_err());
    assert!(DowngradeReply::from_redis_value(Value::Array(vec![int_v(1)])).is_err());
    let odd = Value::Array(vec![
        int_v(1),
        int_v(0),
        text_v(""),
        int_v(0),
        Value::Array(vec![text_v("r1")]),
        Value::Array(vec![]),
    ]);
    assert!(LeaseLockView::from_redis_value(odd).is_err());
    let big = Value::Array(vec![
        int_v(1),
        int_v(0),
        int_v(-1),
        Value::Array(vec![text_v("a#99999999999"), int_v(1)]),
        Value::Array(vec![]),
        int_v(0),
    ]);
    assert!(TicketQueueView::from_redis_value(big).is_err());
    // `cap_foreign` is 0 or 1, and the reply of five elements (without it) is not this one's.
    let queue_reply = |tail: Vec<Value>| {
        let mut items = vec![
            int_v(1),
            int_v(0),
            int_v(-1),
            Value::Array(vec![]),
            Value::Array(vec![]),
        ];
        items.extend(tail);
        Value::Array(items)
    };
    assert!(TicketQueueView::from_redis_value(queue_reply(vec![int_v(1)])).is_ok());
    assert!(TicketQueueView::from_redis_value(queue_reply(vec![int_v(2)])).is_err());
    assert!(TicketQueueView::from_redis_value(queue_reply(vec![])).is_err());
}

#[test]
fn error_replies_round_trip() {
    for code in Code::ALL {
        assert_eq!(Code::parse(code.as_str()), Some(code));
    }
    let refusals = [
        Refusal::Mixed {
            held_by: Family::LeaseLock,
        },
        Refusal::Mixed {
            held_by: Family::TicketQueue,
        },
        Refusal::capacity("3 (set_permits, resizable)", 1),
        Refusal::TooManyPermits {
            asked: 4,
            capacity: 3,
        },
        Refusal::PermitCount { count: -2 },
        Refusal::PermitCount {
            count: i64::from(MAX_PERMITS) + 1,
        },
    ];
    for refusal in refusals {
        let text = refusal.to_string();
        let (code, detail) = text.split_once(' ').expect("code and detail");
        assert_eq!(
            ErrorReply::parse(code, detail),
            Some(ErrorReply::Refused(refusal)),
            "{text}"
        );
    }
    assert_eq!(
        ErrorReply::parse("RLCORRUPT", "key k does not hold a counter"),
        Some(ErrorReply::Corrupt("key k does not hold a counter".into()))
    );
    // The server's note of where the script raised it is left out.
    let located = "key k does not hold a counter script: 334a2028, on @user_script:115.";
    assert_eq!(
        ErrorReply::parse("RLCORRUPT", located),
        Some(ErrorReply::Corrupt("key k does not hold a counter".into()))
    );
    assert_eq!(
        ErrorReply::parse("RLARG", "bad"),
        Some(ErrorReply::Arg("bad".into()))
    );
    assert_eq!(ErrorReply::parse("RLMIXED", "somewhere: else"), None);
    assert_eq!(ErrorReply::parse("RLPERMITS", "too many"), None);
    assert_eq!(ErrorReply::parse("WRONGTYPE", "x"), None);
}

/// The scripts write the same formats: each literal the Rust side relies on appears in
/// the script that produces it.
#[test]
fn scripts_write_these_formats() {
    let source = |name: &str| {
        crate::wire::scripts::sources()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.as_str())
            .unwrap_or_else(|| panic!("no script {name}"))
    };
    assert!(source("rw_acquire").contains(&format!("'RLMIXED {MIXED_QUEUE}'")));
    assert!(source("queue_acquire").contains(&format!("'RLMIXED {MIXED_LEASE}'")));
    assert!(source("queue_acquire")
        .contains("'RLPERMITS asked for ' .. weight .. ' permits of ' .. cap"));
    assert!(source("queue_set_permits").contains(&format!("local MAX_PERMITS = {MAX_PERMITS}")));
    assert!(source("queue_set_permits").contains("'RLPERMITS count '"));
    assert!(source("queue_set_permits").contains("' out of range'"));
    for name in ["rw_release", "force_release"] {
        assert!(source(name).contains("'*'"), "{name} wakes everyone with *");
    }
    assert!(source("queue_acquire").contains("token .. '#' .. weight"));
}
