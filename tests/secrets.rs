//! No secret printed: a URL's password never shows in an error's `Display` or `Debug`, nor in
//! the `Debug` of the client and its settings, on every path that takes a URL; a hold id's
//! token never shows in the error of a malformed id, however the id was damaged. (The CLI's
//! side, `--help` with `REDIS_URL` set and its hints, is in tests/cli.rs.)

mod support;
use support::fake_server::{closed_port, quick};

use proptest::prelude::*;
use redis_locks::{redact_url, Error, HoldId, RedisConfig};
use support::RedisServer;

const SECRET: &str = "s3cretPassw0rd";

/// `err`'s `Display`, its `Debug` and every source: none names the password.
fn assert_no_secret(what: &str, err: &Error) {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        texts.push(s.to_string());
        texts.push(format!("{s:?}"));
        source = s.source();
    }
    for text in texts {
        assert!(!text.contains(SECRET), "{what}: {text}");
    }
}

/// Every way of connecting, with a URL that carries a user and a password, fails without
/// printing the password: a malformed URL (bad port, bad database, unknown scheme), a server
/// that is down, a wrong password, and the same in quorum, Cluster and Sentinel mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connect_error_prints_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "the-right-one"]);
    let port = server.port();
    let down = closed_port();
    let urls = [
        format!("redis://app:{SECRET}@127.0.0.1:notaport/"),
        format!("redis://app:{SECRET}@127.0.0.1:{port}/notadb"),
        format!("http://app:{SECRET}@127.0.0.1:{port}/"),
        format!("redis://app:{SECRET}@127.0.0.1:{down}/"),
        format!("redis://default:{SECRET}@127.0.0.1:{port}/"),
        format!("redis://:{SECRET}@127.0.0.1:{port}/"),
        format!("rediss://app:{SECRET}@127.0.0.1:{port}/"),
        format!("redis+unix:///nowhere/redis.sock?pass={SECRET}"),
    ];
    let mut failed = 0;
    for url in &urls {
        if let Err(err) = quick().connect(url).await {
            assert_no_secret(url, &err);
            failed += 1;
        }
        if let Err(err) = quick().quorum(&[url, url, url]).await {
            assert_no_secret(url, &err);
            failed += 1;
        }
        if let Err(err) = quick().cluster(&[url]).await {
            assert_no_secret(url, &err);
            failed += 1;
        }
        if let Err(err) = quick().sentinel(&[url], "mymaster").await {
            assert_no_secret(url, &err);
            failed += 1;
        }
    }
    assert_eq!(failed, urls.len() * 4, "every attempt fails");
}

/// A client connected with a password, its builder and its settings: `Debug` shows no
/// password, nor do the errors of its commands (here: a lost server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_of_the_client_and_its_settings_shows_no_password() {
    let mut server = RedisServer::start_with(&["--requirepass", SECRET]);
    let url = format!("redis://default:{SECRET}@127.0.0.1:{}/", server.port());
    let builder = quick().prefix("app");
    assert!(!format!("{builder:?}").contains(SECRET));
    assert!(!format!("{:?}", RedisConfig::default()).contains(SECRET));
    let client = builder.connect(&url).await.expect("the right password");
    let debug = format!("{client:?}");
    assert!(!debug.contains(SECRET), "{debug}");
    let guard = client.mutex("m").lock().await.expect("lock");
    assert!(!format!("{guard:?}").contains(SECRET));
    server.kill();
    let err = client.mutex("n").try_lock().await.expect_err("server gone");
    assert!(err.is_connection(), "{err:?}");
    assert_no_secret("a command to a lost server", &err);
    drop(guard);
}

#[test]
fn redact_url_hides_every_password_form() {
    for url in [
        format!("redis://app:{SECRET}@h:1/0"),
        format!("rediss://:{SECRET}@h"),
        format!("app:{SECRET}@h:6379"),
        format!("redis+unix:///s.sock?db=2&password={SECRET}"),
    ] {
        let shown = redact_url(&url);
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
    assert_eq!(redact_url("redis://h:6379/0"), "redis://h:6379/0");
}

/// A generated-looking token: 16 hex digits, then 16 characters of the secret alphabet, then
/// a label.
fn token() -> impl Strategy<Value = String> {
    ("[0-9a-f]{16}", "[A-Za-z0-9_-]{16}", "[a-z0-9-]{1,12}")
        .prop_map(|(shown, secret, label)| format!("{shown}{secret}-{label}"))
}

/// A kind of hold as `Display` writes it.
fn kind() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("mutex".to_owned()),
        Just("fair".to_owned()),
        Just("read-writer".to_owned()),
        Just("write-fair".to_owned()),
        (1u32..4, 4u32..9).prop_map(|(p, c)| format!("sem-{p}-{c}")),
    ]
}

/// One edit of a text: delete, insert or replace a character, or lose a `:`.
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Insert(usize, char),
    Replace(usize, char),
    LoseColon(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let any_char = prop_oneof![
        Just(':'),
        Just('-'),
        Just('0'),
        Just('}'),
        Just(' '),
        Just('|'),
        proptest::char::range('a', 'z'),
        proptest::char::range('\u{80}', '\u{3ff}'),
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), any_char.clone()).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), any_char).prop_map(|(i, c)| Edit::Replace(i, c)),
        any::<usize>().prop_map(Edit::LoseColon),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    match *edit {
        Edit::Delete(i) => {
            chars.remove(i % chars.len());
        }
        Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
        Edit::Replace(i, c) => {
            let i = i % chars.len();
            chars[i] = c;
        }
        Edit::LoseColon(i) => {
            let colons: Vec<usize> = (0..chars.len()).filter(|&j| chars[j] == ':').collect();
            if !colons.is_empty() {
                chars.remove(colons[i % colons.len()]);
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        support::env_u32("MODEL_CASES", 2000)
    ))]

    /// However a hold id is damaged (characters deleted, inserted or replaced, a `:` lost),
    /// the error that refuses it repeats no part of the token's secret characters, in
    /// `Display` or `Debug`.
    #[test]
    fn a_malformed_id_never_repeats_its_token(
        kind in kind(),
        fence in prop_oneof![Just(0u64), 1u64..100, Just(1_764_000_000_000_000u64)],
        token in token(),
        name in "[a-z][a-z:0-9]{0,12}",
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let id = format!("rlh1:{kind}:{fence}:{token}:{name}");
        prop_assert!(id.parse::<HoldId>().is_ok(), "{}", id);
        let damaged = edits.iter().fold(id, |text, e| apply(&text, e));
        if let Err(err) = damaged.parse::<HoldId>() {
            prop_assert!(matches!(err, Error::MalformedHoldId { .. }), "{:?}", err);
            let secret = &token[16..32];
            for text in [err.to_string(), format!("{err:?}")] {
                prop_assert!(!text.contains(&token), "{}: {}", damaged, text);
                for window in secret.as_bytes().windows(6) {
                    let window = std::str::from_utf8(window).expect("ascii");
                    prop_assert!(!text.contains(window), "{}: {}", damaged, text);
                }
            }
        }
    }
}
