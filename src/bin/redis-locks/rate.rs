//! `redis-locks rate NAME --per-second N [--burst B]`: a rate limiter's state, read through
//! its public handle (`RateLimiter::inspect`) without changing anything. The limit is given
//! on the command line because the server stores only what the decisions need (the
//! theoretical arrival time), not the period or the burst.

use std::process::ExitCode;

use redis_locks::{Error, LockClient, Rate, RateLimiterInfo};

use super::{json_label, json_str};

/// The rate from the command line: exactly one of the three counts, then the burst.
pub(crate) fn rate_of(
    per_second: Option<u64>,
    per_minute: Option<u64>,
    per_hour: Option<u64>,
    burst: Option<u64>,
) -> Result<Rate, Error> {
    let rate = match (per_second, per_minute, per_hour) {
        (Some(n), None, None) => Rate::per_second(n),
        (None, Some(n), None) => Rate::per_minute(n),
        (None, None, Some(n)) => Rate::per_hour(n),
        _ => {
            return Err(Error::InvalidArgument {
                what: "rate",
                reason: "give exactly one of --per-second, --per-minute, --per-hour, as the limiter was made".into(),
            })
        }
    };
    let rate = burst.map_or(rate, |b| rate.burst(b));
    rate.check()?;
    Ok(rate)
}

/// Prints the limiter's state as text or one JSON object.
pub(crate) async fn show(
    client: &LockClient,
    name: &str,
    rate: Rate,
    json: bool,
) -> Result<ExitCode, Error> {
    let info = client.rate_limiter(name, rate).inspect().await?;
    if json {
        println!("{}", to_json(&info));
    } else {
        print!("{}", to_text(&info));
    }
    Ok(ExitCode::SUCCESS)
}

fn to_text(info: &RateLimiterInfo) -> String {
    let r = info.rate;
    let mut out = format!(
        "rate limiter {}: {} per {:?}, burst {}\navailable now: {} (next single admission in {} ms)\n",
        info.name,
        r.count(),
        r.period(),
        r.burst_size(),
        info.available,
        info.next_in.as_millis()
    );
    if info.waiters.is_empty() {
        out.push_str("waiters: none\n");
    }
    for w in &info.waiters {
        out.push_str(&format!(
            "waiter {}: {} {} permits, heartbeat left {} ms{}\n",
            w.position,
            w.token_prefix,
            w.permits,
            w.heartbeat_remaining.as_millis(),
            w.label
                .as_deref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        ));
    }
    out
}

fn to_json(info: &RateLimiterInfo) -> String {
    let waiters: Vec<String> = info
        .waiters
        .iter()
        .map(|w| {
            format!(
                "{{\"position\":{},\"token\":{},\"label\":{},\"permits\":{},\"heartbeat_left_ms\":{}}}",
                w.position,
                json_str(&w.token_prefix),
                json_label(w.label.as_deref()),
                w.permits,
                w.heartbeat_remaining.as_millis()
            )
        })
        .collect();
    format!(
        "{{\"name\":{},\"count\":{},\"period_ms\":{},\"burst\":{},\"available\":{},\"next_in_ms\":{},\"waiters\":[{}]}}",
        json_str(&info.name),
        info.rate.count(),
        info.rate.period_ms(),
        info.rate.burst_size(),
        info.available,
        info.next_in.as_millis(),
        waiters.join(",")
    )
}
