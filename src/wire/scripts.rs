//! The Lua scripts, pulled in at compile time (`include_str!`) and assembled once per process.
//!
//! Each step is its file in `lua/`, run with the shared `prelude.lua` and its family's
//! `*_common.lua`. A script is assembled in this order:
//!
//! 1. the shebang line with the step's flags;
//! 2. the top-level statements of the prelude and the common file (the clock, the key names);
//! 3. the step's **fast path**, if it has one: the part of the step file above its
//!    `-- @general` line, which answers the common cases (a free lock, nobody waiting) with
//!    the fewest calls and returns, or falls through;
//! 4. the helper functions of the prelude and the common file that the rest of the script
//!    calls, directly or through another helper, in their file order; the others are left out,
//!    because every `local function` of a script is a closure built again on every call;
//! 5. the step's general logic.
//!
//! A fast path uses no helper (none is defined yet where it runs), so a call it answers
//! builds none. Every fast path must leave the same state and give the same reply as the
//! general logic would from the same state: the model check (`tests/model.rs`) runs both
//! side by side on every program, comparing replies and every key (the [`Variant::General`]
//! scripts have no fast path), and counts, through [`Variant::Probed`], that its runs take
//! every fast path and every general one. A step with several fast paths marks where each
//! decides to answer with a `-- @fast <name>` line (a comment in production; in the probed
//! form, followed by a publish of `<step>:fast:<name>`), so each is counted on its own.
//!
//! Each step comes in two forms ([`Step`]): `full`, as assembled above, and `plain`, the same
//! text on the server clock with `PUBLISH` and the step's own arguments from `ARGV[1]`, which a
//! single server runs (two arguments fewer per call).
//!
//! Under an explicit clock (tests only) the scripts send the same commands as under the
//! server clock; key TTLs are a day longer, so no key expires under a virtual clock.
//!
//! The text is static (files of this crate joined by rules that only drop whole helper
//! functions), never code built from data.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use redis::Script;

/// The line that ends a step's fast path.
const GENERAL: &str = "-- @general";

const PRELUDE: &str = include_str!("../../lua/prelude.lua");
const RW_COMMON: &str = include_str!("../../lua/rw_common.lua");
const QUEUE_COMMON: &str = include_str!("../../lua/queue_common.lua");
const RATE_COMMON: &str = include_str!("../../lua/rate_common.lua");

// The shebang flags: without flags, Redis refuses the whole script with -OOM when `maxmemory`
// is reached, before it runs (a script that has written once is otherwise let through, and
// every script prunes before it grants). Steps that only give up or renew what a holder has
// carry `allow-oom`, so holders can still let go; read-only steps carry `no-writes`.
const PLAIN: &str = "#!lua";
const ALLOW_OOM: &str = "#!lua flags=allow-oom";
const NO_WRITES: &str = "#!lua flags=no-writes";

/// Every step: name, flags, common file (if any), step file.
const STEPS: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "rw_acquire",
        PLAIN,
        Some(RW_COMMON),
        include_str!("../../lua/rw_acquire.lua"),
    ),
    (
        "rw_release",
        ALLOW_OOM,
        Some(RW_COMMON),
        include_str!("../../lua/rw_release.lua"),
    ),
    (
        "rw_extend",
        ALLOW_OOM,
        Some(RW_COMMON),
        include_str!("../../lua/rw_extend.lua"),
    ),
    (
        "rw_downgrade",
        ALLOW_OOM,
        Some(RW_COMMON),
        include_str!("../../lua/rw_downgrade.lua"),
    ),
    (
        "rw_inspect",
        NO_WRITES,
        Some(RW_COMMON),
        include_str!("../../lua/rw_inspect.lua"),
    ),
    (
        "queue_acquire",
        PLAIN,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_acquire.lua"),
    ),
    (
        "queue_release",
        ALLOW_OOM,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_release.lua"),
    ),
    (
        "queue_extend",
        ALLOW_OOM,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_extend.lua"),
    ),
    (
        "queue_downgrade",
        ALLOW_OOM,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_downgrade.lua"),
    ),
    (
        "queue_set_permits",
        PLAIN,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_set_permits.lua"),
    ),
    (
        "queue_inspect",
        NO_WRITES,
        Some(QUEUE_COMMON),
        include_str!("../../lua/queue_inspect.lua"),
    ),
    (
        "force_release",
        ALLOW_OOM,
        None,
        include_str!("../../lua/force_release.lua"),
    ),
    (
        "force_release_holder",
        ALLOW_OOM,
        None,
        include_str!("../../lua/force_release_holder.lua"),
    ),
    (
        "raise_fence",
        PLAIN,
        None,
        include_str!("../../lua/raise_fence.lua"),
    ),
    (
        "multi_acquire",
        PLAIN,
        Some(RW_COMMON),
        include_str!("../../lua/multi_acquire.lua"),
    ),
    (
        "election_proclaim",
        PLAIN,
        None,
        include_str!("../../lua/election_proclaim.lua"),
    ),
    (
        "election_leader",
        NO_WRITES,
        None,
        include_str!("../../lua/election_leader.lua"),
    ),
    (
        "rate_acquire",
        PLAIN,
        Some(RATE_COMMON),
        include_str!("../../lua/rate_acquire.lua"),
    ),
    (
        "rate_cancel",
        ALLOW_OOM,
        Some(RATE_COMMON),
        include_str!("../../lua/rate_cancel.lua"),
    ),
    (
        "rate_inspect",
        NO_WRITES,
        Some(RATE_COMMON),
        include_str!("../../lua/rate_inspect.lua"),
    ),
];

/// Which form of the scripts a store runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum Variant {
    /// What the library runs: fast paths, then the general logic.
    Production,
    /// Without the fast paths: every call runs the general logic (the reference the fast
    /// paths are compared with).
    General,
    /// The production scripts, plus a `PUBLISH` on [`PROBE_CHANNEL`] of `<step>:call` when a
    /// step starts and `<step>:general` when a call reaches the general logic (tests count
    /// which paths their runs took).
    Probed,
}

/// The channel [`Variant::Probed`] scripts report their paths on.
pub const PROBE_CHANNEL: &str = "redis-locks-probe";

/// A part of a shared file: a helper function (with the comment above it) or anything else.
struct Piece<'a> {
    function: Option<&'a str>,
    text: String,
}

/// Splits a shared file into top-level statements and `local function` helpers; a helper
/// runs from its `local function NAME(` line (with the comment lines just above it) to the
/// first line that is exactly `end`.
fn pieces(src: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut comments = String::new();
    let mut lines = src.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or_default().trim();
            let mut text = std::mem::take(&mut comments);
            text.push_str(line);
            text.push('\n');
            for body in lines.by_ref() {
                text.push_str(body);
                text.push('\n');
                if body == "end" {
                    break;
                }
            }
            out.push(Piece {
                function: Some(name),
                text,
            });
        } else if line.starts_with("--") || line.trim().is_empty() {
            comments.push_str(line);
            comments.push('\n');
        } else {
            let mut text = std::mem::take(&mut comments);
            text.push_str(line);
            text.push('\n');
            out.push(Piece {
                function: None,
                text,
            });
        }
    }
    out
}

/// The identifiers in Lua `code`, outside comments.
fn identifiers(code: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("--").next().unwrap_or_default();
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.is_empty() {
                out.insert(word);
            }
        }
    }
    out
}

/// Assembles one step's script (see the module docs).
fn assemble(name: &str, flags: &str, common: Option<&str>, step: &str, variant: Variant) -> String {
    let shared: Vec<Piece<'_>> = pieces(PRELUDE)
        .into_iter()
        .chain(common.map(pieces).unwrap_or_default())
        .collect();
    let (fast, general) = match step.split_once(&format!("\n{GENERAL}\n")) {
        Some((fast, general)) => (fast, general),
        None => ("", step),
    };
    let fast = match variant {
        Variant::General => String::new(),
        Variant::Probed => probe_fast_paths(name, fast),
        Variant::Production => fast.to_owned(),
    };
    let fast = fast.as_str();

    // The helpers the script calls, directly or through each other.
    let mut needed: BTreeSet<&str> = identifiers(fast)
        .into_iter()
        .chain(identifiers(general))
        .collect();
    for p in shared.iter().filter(|p| p.function.is_none()) {
        needed.extend(identifiers(&p.text));
    }
    loop {
        let before = needed.len();
        for p in &shared {
            if let Some(f) = p.function
                && needed.contains(f)
            {
                needed.extend(identifiers(&p.text));
            }
        }
        if needed.len() == before {
            break;
        }
    }

    let mut out = String::new();
    out.push_str(flags);
    out.push('\n');
    for p in shared.iter().filter(|p| p.function.is_none()) {
        out.push_str(&p.text);
    }
    if variant == Variant::Probed {
        out.push_str(&format!(
            "redis.pcall('PUBLISH', '{PROBE_CHANNEL}', '{name}:call')\n"
        ));
    }
    out.push_str(fast);
    out.push('\n');
    for p in &shared {
        if let Some(f) = p.function
            && needed.contains(f)
        {
            out.push_str(&p.text);
        }
    }
    if variant == Variant::Probed {
        out.push_str(&format!(
            "redis.pcall('PUBLISH', '{PROBE_CHANNEL}', '{name}:general')\n"
        ));
    }
    out.push_str(general);
    out
}

/// The prelude's lines that read its two arguments (`ARGV[1]`, `ARGV[2]`), from the first
/// through the last.
const PRELUDE_ARGS: (&str, &str) = (
    "local NOW, NOW_US, TTL_PAD\n",
    "local PUBLISH_CMD = ARGV[2]\n",
);

/// What replaces them in a step's `plain` form: the server clock and `PUBLISH`, as the
/// prelude sets them for `ARGV[1] == ""` and `ARGV[2] == "PUBLISH"`.
const PLAIN_PRELUDE: &str = "local NOW, NOW_US, TTL_PAD = nil, nil, 0
do
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  NOW = s * 1000 + math.floor(us / 1000)
  NOW_US = s * 1000000 + us
end
local PUBLISH_CMD = 'PUBLISH'
";

/// The `plain` form of an assembled script (see [`Step`]): the prelude's argument lines
/// replaced by [`PLAIN_PRELUDE`], and every `ARGV[n]` of the code (comments are left as they
/// are) renumbered `ARGV[n - 2]`. Panics if the code reads `ARGV[1]` or `ARGV[2]` anywhere
/// else (a unit test assembles every step).
fn plain_of(full: &str) -> String {
    let (first, last) = PRELUDE_ARGS;
    let (Some(start), Some(end)) = (full.find(first), full.find(last)) else {
        return full.to_owned(); // no prelude (not a lock step)
    };
    let text = format!(
        "{}{PLAIN_PRELUDE}{}",
        &full[..start],
        &full[end + last.len()..]
    );
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (code, comment) = match line.find("--") {
            Some(at) => line.split_at(at),
            None => (line, ""),
        };
        let mut rest = code;
        while let Some(at) = rest.find("ARGV[") {
            let (before, after) = rest.split_at(at + "ARGV[".len());
            out.push_str(before);
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            let n: usize = after[..digits]
                .parse()
                .expect("ARGV[ is followed by a number");
            assert!(n > 2, "a step reads the prelude's ARGV[{n}]: {line}");
            out.push_str(&(n - 2).to_string());
            rest = &after[digits..];
        }
        out.push_str(rest);
        out.push_str(comment);
    }
    out
}

/// The line that marks where a fast path has decided to answer: `-- @fast <name>`.
const FAST: &str = "-- @fast ";

/// `fast` with each `-- @fast <name>` line followed by a publish of `<step>:fast:<name>` on
/// [`PROBE_CHANNEL`] (the [`Variant::Probed`] scripts), so tests can tell a step's fast paths
/// apart.
fn probe_fast_paths(step: &str, fast: &str) -> String {
    let mut out = String::new();
    for line in fast.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(path) = line.trim_start().strip_prefix(FAST) {
            out.push_str(&format!(
                "redis.pcall('PUBLISH', '{PROBE_CHANNEL}', '{step}:fast:{}')\n",
                path.trim()
            ));
        }
    }
    out
}

/// The names of the fast paths of a step's production script (its `-- @fast <name>` lines).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn fast_paths_of(source: &str) -> Vec<&str> {
    source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix(FAST))
        .map(str::trim)
        .collect()
}

/// Every script of `variant`, by step name.
fn sources_of(variant: Variant) -> Vec<(&'static str, String)> {
    STEPS
        .iter()
        .map(|(name, flags, common, step)| (*name, assemble(name, flags, *common, step, variant)))
        .collect()
}

static SOURCES: LazyLock<Vec<(&'static str, String)>> =
    LazyLock::new(|| sources_of(Variant::Production));

/// The production script sources, by step name (also for tools that load them by hand).
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn sources() -> &'static [(&'static str, String)] {
    &SOURCES
}

/// The plain forms of the production scripts, by step name: what a single server runs.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn plain_sources() -> &'static [(&'static str, String)] {
    static PLAIN: LazyLock<Vec<(&'static str, String)>> = LazyLock::new(|| {
        sources()
            .iter()
            .map(|(name, full)| (*name, plain_of(full)))
            .collect()
    });
    &PLAIN
}

/// The script sources of `variant`, by step name.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub fn sources_of_variant(variant: Variant) -> &'static [(&'static str, String)] {
    match variant {
        Variant::Production => &SOURCES,
        Variant::General => &GENERAL_SOURCES,
        Variant::Probed => &PROBED_SOURCES,
    }
}

static GENERAL_SOURCES: LazyLock<Vec<(&'static str, String)>> =
    LazyLock::new(|| sources_of(Variant::General));
static PROBED_SOURCES: LazyLock<Vec<(&'static str, String)>> =
    LazyLock::new(|| sources_of(Variant::Probed));

/// One step's script in its two forms. `full` reads the prelude's two arguments (`ARGV[1]` the
/// clock, `ARGV[2]` the publish command) ahead of the step's own; `plain` is the same script
/// on the server clock with `PUBLISH`, taking only the step's own arguments (from `ARGV[1]`):
/// two arguments fewer per call, about 3,300 server instructions
/// (docs/decisions/server-instructions.md). A single server or Sentinel runs `plain`; Redis
/// Cluster (`SPUBLISH`) and the tests' explicit clock run `full`.
pub(crate) struct Step {
    pub full: Script,
    pub plain: Script,
}

/// The compiled scripts (SHA1 computed once).
pub(crate) struct Scripts {
    pub rw_acquire: Step,
    pub rw_release: Step,
    pub rw_extend: Step,
    pub rw_downgrade: Step,
    pub rw_inspect: Step,
    pub queue_acquire: Step,
    pub queue_release: Step,
    pub queue_extend: Step,
    pub queue_downgrade: Step,
    pub queue_set_permits: Step,
    pub queue_inspect: Step,
    pub force_release: Step,
    pub force_release_holder: Step,
    pub raise_fence: Step,
    pub multi_acquire: Step,
    pub election_proclaim: Step,
    pub election_leader: Step,
    pub rate_acquire: Step,
    pub rate_cancel: Step,
    pub rate_inspect: Step,
}

impl Scripts {
    fn of(variant: Variant) -> Scripts {
        let sources = sources_of_variant(variant);
        let script = |name: &str| {
            let full = sources
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, s)| s.as_str())
                .unwrap_or_default();
            Step {
                full: Script::new(full),
                plain: Script::new(&plain_of(full)),
            }
        };
        Scripts {
            rw_acquire: script("rw_acquire"),
            rw_release: script("rw_release"),
            rw_extend: script("rw_extend"),
            rw_downgrade: script("rw_downgrade"),
            rw_inspect: script("rw_inspect"),
            queue_acquire: script("queue_acquire"),
            queue_release: script("queue_release"),
            queue_extend: script("queue_extend"),
            queue_downgrade: script("queue_downgrade"),
            queue_set_permits: script("queue_set_permits"),
            queue_inspect: script("queue_inspect"),
            force_release: script("force_release"),
            force_release_holder: script("force_release_holder"),
            raise_fence: script("raise_fence"),
            multi_acquire: script("multi_acquire"),
            election_proclaim: script("election_proclaim"),
            election_leader: script("election_leader"),
            rate_acquire: script("rate_acquire"),
            rate_cancel: script("rate_cancel"),
            rate_inspect: script("rate_inspect"),
        }
    }

    /// The compiled scripts of `variant`.
    pub(crate) fn get(variant: Variant) -> &'static Scripts {
        static PRODUCTION: LazyLock<Scripts> = LazyLock::new(|| Scripts::of(Variant::Production));
        static GENERAL: LazyLock<Scripts> = LazyLock::new(|| Scripts::of(Variant::General));
        static PROBED: LazyLock<Scripts> = LazyLock::new(|| Scripts::of(Variant::Probed));
        match variant {
            Variant::Production => &PRODUCTION,
            Variant::General => &GENERAL,
            Variant::Probed => &PROBED,
        }
    }
}

/// The probe of what the scripts need of the server (`lua/capabilities.lua`), run when a
/// client connects: not a lock step, so it has no prelude and no variants.
pub(crate) fn capabilities() -> &'static Script {
    static PROBE: LazyLock<Script> =
        LazyLock::new(|| Script::new(include_str!("../../lua/capabilities.lua")));
    &PROBE
}

/// The source of any of the crate's scripts (every variant), by its SHA1.
#[cfg(feature = "cluster")]
pub(crate) fn source_by_hash(sha: &str) -> Option<&'static str> {
    use std::collections::HashMap;
    static BY_HASH: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
        [Variant::Production, Variant::General, Variant::Probed]
            .into_iter()
            .flat_map(sources_of_variant)
            .map(|(_, src)| (Script::new(src).get_hash().to_owned(), src.as_str()))
            .chain([(
                capabilities().get_hash().to_owned(),
                include_str!("../../lua/capabilities.lua"),
            )])
            .collect()
    });
    BY_HASH.get(sha).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_a_script_does_not_call_are_left_out() {
        let extend = &sources()
            .iter()
            .find(|(n, _)| *n == "rw_extend")
            .expect("rw_extend")
            .1;
        assert!(extend.contains("local function live_writer("));
        assert!(extend.contains("local function set_writer("));
        assert!(!extend.contains("local function hand_over("));
        assert!(!extend.contains("local function zrem_all("));
        // A helper called only through another one is kept.
        let release = &sources()
            .iter()
            .find(|(n, _)| *n == "rw_release")
            .expect("rw_release")
            .1;
        assert!(release.contains("local function hand_over("));
        assert!(release.contains("local function next_fence("));
        assert!(release.contains("local function corrupt_counter("));
    }

    #[test]
    fn fast_paths_come_before_the_helpers_and_only_in_production() {
        for variant in [Variant::Production, Variant::General, Variant::Probed] {
            let acquire = &sources_of_variant(variant)
                .iter()
                .find(|(n, _)| *n == "rw_acquire")
                .expect("rw_acquire")
                .1;
            let helpers = acquire.find("local function ").expect("helpers");
            let fast = acquire.find("-- Fast path");
            if variant == Variant::General {
                assert_eq!(fast, None);
            } else {
                assert!(fast.expect("a fast path") < helpers);
            }
            assert_eq!(
                acquire.contains(PROBE_CHANNEL),
                variant == Variant::Probed,
                "{variant:?}"
            );
        }
    }

    #[test]
    fn named_fast_paths_publish_their_probe_only_when_probed() {
        let of = |variant| {
            &sources_of_variant(variant)
                .iter()
                .find(|(n, _)| *n == "queue_acquire")
                .expect("queue_acquire")
                .1
        };
        assert_eq!(fast_paths_of(of(Variant::Production)), ["claim", "waiter"]);
        assert!(of(Variant::Probed).contains("'queue_acquire:fast:waiter')"));
        assert!(!of(Variant::Production).contains("queue_acquire:fast:"));
        assert!(fast_paths_of(of(Variant::General)).is_empty());
    }

    #[test]
    fn every_step_has_its_script() {
        assert_eq!(sources().len(), STEPS.len());
        for (name, source) in sources() {
            assert!(source.starts_with("#!lua"), "{name}");
            assert!(!source.contains(GENERAL), "{name}: the marker is not sent");
        }
    }

    /// The `ARGV` indices the code of `script` reads, in order (comments left out).
    fn argv_reads(script: &str) -> Vec<usize> {
        let mut out = Vec::new();
        for line in script.lines() {
            let code = line.split("--").next().unwrap_or_default();
            for part in code.split("ARGV[").skip(1) {
                let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
                out.push(digits.parse().expect("ARGV[ is followed by a number"));
            }
        }
        out
    }

    #[test]
    fn plain_forms_read_the_step_arguments_from_argv_1() {
        for variant in [Variant::Production, Variant::General, Variant::Probed] {
            for (name, full) in sources_of_variant(variant) {
                let plain = plain_of(full);
                // The prelude reads ARGV[1] three times and ARGV[2] once; every other read
                // moves down by two.
                let mut expected = argv_reads(full);
                for prelude_read in [1, 1, 1, 2] {
                    let at = expected.iter().position(|n| *n == prelude_read);
                    expected
                        .remove(at.unwrap_or_else(|| panic!("{name}: no ARGV[{prelude_read}]")));
                }
                let expected: Vec<usize> = expected.into_iter().map(|n| n - 2).collect();
                assert_eq!(argv_reads(&plain), expected, "{name} ({variant:?})");
                assert!(plain.contains("local PUBLISH_CMD = 'PUBLISH'"), "{name}");
                assert!(
                    !plain.contains("TTL_PAD = 86400000"),
                    "{name}: no explicit clock"
                );
                assert!(plain.starts_with("#!lua"), "{name}: the flags stay first");
            }
        }
    }
}
