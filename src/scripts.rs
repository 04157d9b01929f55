//! The Lua scripts, pulled in at compile time. Each script is its file in `lua/`, preceded by
//! the shared `prelude.lua` and its family's `*_common.lua` (static text joined by `concat!`,
//! never code built from data).

use std::sync::LazyLock;

use redis::Script;

// The first line is a Redis 7 shebang: without flags, Redis refuses the whole script with
// -OOM when `maxmemory` is reached, before it runs (a script that has written once is
// otherwise let through, and every script prunes before it grants). Steps that only give
// up or renew what a holder has carry `allow-oom`, so holders can still let go; read-only
// steps carry `no-writes`.
macro_rules! lua {
    ($flags:literal, $common:literal, $file:literal) => {
        concat!(
            $flags,
            "\n",
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!(concat!("../lua/", $common)),
            "\n",
            include_str!(concat!("../lua/", $file))
        )
    };
}

/// Script sources, by name (also used by tools that want to load them by hand).
pub const SOURCES: &[(&str, &str)] = &[
    (
        "rw_acquire",
        lua!("#!lua", "rw_common.lua", "rw_acquire.lua"),
    ),
    (
        "rw_release",
        lua!("#!lua flags=allow-oom", "rw_common.lua", "rw_release.lua"),
    ),
    (
        "rw_extend",
        lua!("#!lua flags=allow-oom", "rw_common.lua", "rw_extend.lua"),
    ),
    (
        "rw_downgrade",
        lua!("#!lua flags=allow-oom", "rw_common.lua", "rw_downgrade.lua"),
    ),
    (
        "rw_inspect",
        lua!("#!lua flags=no-writes", "rw_common.lua", "rw_inspect.lua"),
    ),
    (
        "queue_acquire",
        lua!("#!lua", "queue_common.lua", "queue_acquire.lua"),
    ),
    (
        "queue_release",
        lua!(
            "#!lua flags=allow-oom",
            "queue_common.lua",
            "queue_release.lua"
        ),
    ),
    (
        "queue_extend",
        lua!(
            "#!lua flags=allow-oom",
            "queue_common.lua",
            "queue_extend.lua"
        ),
    ),
    (
        "queue_downgrade",
        lua!(
            "#!lua flags=allow-oom",
            "queue_common.lua",
            "queue_downgrade.lua"
        ),
    ),
    (
        "queue_set_permits",
        lua!("#!lua", "queue_common.lua", "queue_set_permits.lua"),
    ),
    (
        "queue_inspect",
        lua!(
            "#!lua flags=no-writes",
            "queue_common.lua",
            "queue_inspect.lua"
        ),
    ),
    (
        "force_release",
        concat!(
            "#!lua flags=allow-oom\n",
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!("../lua/force_release.lua")
        ),
    ),
    (
        "raise_fence",
        concat!(
            "#!lua\n",
            include_str!("../lua/prelude.lua"),
            "\n",
            include_str!("../lua/raise_fence.lua")
        ),
    ),
];

/// The compiled scripts (SHA1 computed once).
pub(crate) struct Scripts {
    pub rw_acquire: Script,
    pub rw_release: Script,
    pub rw_extend: Script,
    pub rw_downgrade: Script,
    pub rw_inspect: Script,
    pub queue_acquire: Script,
    pub queue_release: Script,
    pub queue_extend: Script,
    pub queue_downgrade: Script,
    pub queue_set_permits: Script,
    pub queue_inspect: Script,
    pub force_release: Script,
    pub raise_fence: Script,
}

fn source(name: &str) -> &'static str {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or_default()
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    rw_acquire: Script::new(source("rw_acquire")),
    rw_release: Script::new(source("rw_release")),
    rw_extend: Script::new(source("rw_extend")),
    rw_downgrade: Script::new(source("rw_downgrade")),
    rw_inspect: Script::new(source("rw_inspect")),
    queue_acquire: Script::new(source("queue_acquire")),
    queue_release: Script::new(source("queue_release")),
    queue_extend: Script::new(source("queue_extend")),
    queue_downgrade: Script::new(source("queue_downgrade")),
    queue_set_permits: Script::new(source("queue_set_permits")),
    queue_inspect: Script::new(source("queue_inspect")),
    force_release: Script::new(source("force_release")),
    raise_fence: Script::new(source("raise_fence")),
});
