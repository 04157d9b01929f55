//! [`redact_url`]: a Redis URL fit to print, its password replaced.

/// `url` with its password replaced by `***`, fit for a log line, an error or a `--help`
/// text: `redis://user:s3cret@host:6379/0` becomes `redis://user:***@host:6379/0`, and a
/// `pass=` or `password=` query parameter (the Unix-socket form
/// `redis+unix:///tmp/redis.sock?pass=...`) is replaced the same way. A URL without a
/// password is returned as it is. The text need not be a valid URL: whatever stands between
/// the first `:` after the scheme and the last `@` before the query is treated as the
/// password, so a mistyped URL is redacted too.
///
/// Every message of this crate that quotes a URL quotes it through this function.
///
/// ```
/// use redis_locks::redact_url;
/// assert_eq!(redact_url("redis://app:s3cret@10.0.0.5:6379/2"), "redis://app:***@10.0.0.5:6379/2");
/// assert_eq!(redact_url("rediss://:s3cret@cache"), "rediss://:***@cache");
/// assert_eq!(redact_url("redis://127.0.0.1/"), "redis://127.0.0.1/");
/// assert_eq!(
///     redact_url("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
///     "redis+unix:///run/redis.sock?db=1&pass=***"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let query_at = rest.find(['?', '#']).unwrap_or(rest.len());
    let (before_query, query) = rest.split_at(query_at);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    match before_query.rfind('@') {
        Some(at) => {
            let (userinfo, host) = before_query.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(host);
        }
        None => out.push_str(before_query),
    }
    out.push_str(&redact_query(query));
    out
}

/// `query` (from its `?` on) with the values of `pass` and `password` replaced.
fn redact_query(query: &str) -> String {
    let Some(params) = query.strip_prefix('?') else {
        return query.to_owned();
    };
    let (params, fragment) = match params.find('#') {
        Some(i) => params.split_at(i),
        None => (params, ""),
    };
    let params: Vec<String> = params
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((key, _))
                if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
            {
                format!("{key}=***")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("?{}{fragment}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn every_form_loses_its_password() {
        for (url, expected) in [
            ("redis://u:s3cret@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:s3cret@h", "redis://:***@h"),
            ("redis://u@h", "redis://u@h"),
            ("redis://h:6379", "redis://h:6379"),
            ("u:s3cret@h:6379", "u:***@h:6379"),
            ("redis://u:s3c/r@t@h:1", "redis://u:***@h:1"),
            ("redis://u:s3cret@h:notaport", "redis://u:***@h:notaport"),
            ("redis+unix:///s?pass=s3cret", "redis+unix:///s?pass=***"),
            (
                "redis+unix:///s?password=s3cret#f",
                "redis+unix:///s?password=***#f",
            ),
            ("", ""),
        ] {
            assert_eq!(redact_url(url), expected, "{url}");
            assert!(!redact_url(url).contains("s3c"), "{url}");
        }
    }
}
