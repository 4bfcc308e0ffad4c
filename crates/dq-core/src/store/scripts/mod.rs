//! The Lua scripts, one file per atomic operation beside this one, each loaded once and run by EVALSHA.
//!
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (a restarted or failed-over Redis), loads the script and
//! retries; no script text is ever built from runtime values (invariant 7).
//!
//! Every script touches the keys of one partition only, so it runs in one Redis Cluster slot: in the
//! headers, `<prefix>` of a job's keys is the partition's prefix `<prefix>:{<tag>}` (see [`crate::store::keys`]).
//! The exceptions are `balance.lua`, whose keys are the timers' own, the schedules' scripts
//! (`{<prefix>}:…`, one slot too), `activity_add.lua` (the dashboard's minute hashes, `{<prefix>}:…`), and `limit.lua`, whose one key is a topic's
//! (`<prefix>:{topic:<topic>}:limit`).
//!
//! Scripts that wake processes over pub/sub call `redis.call(publish, channel, message)` and come in two
//! builds ([`Waking`]): `publish` is `PUBLISH` for a standalone Redis and Sentinel, where one subscription
//! on the primary hears every partition, and `SPUBLISH` for a cluster, where a classic PUBLISH travels to
//! every node over the cluster bus (up to 40 ms late, measured) while a sharded one goes straight to the
//! subscribers of the partition's own node. Each build is a static text; which one runs is chosen by
//! `redis.mode`, never written from runtime values.

use std::sync::LazyLock;

use redis::Script;

/// A script that publishes wake-ups, in its two builds (see the module's doc).
pub struct Waking {
    /// With `publish = 'PUBLISH'`: standalone and Sentinel.
    classic: LazyLock<Script>,
    /// With `publish = 'SPUBLISH'`: Redis Cluster (sharded pub/sub, Redis 7.0 or later).
    sharded: LazyLock<Script>,
}

impl Waking {
    /// The build for a cluster (`sharded`) or not.
    pub fn get(&self, sharded: bool) -> &Script {
        if sharded { &self.sharded } else { &self.classic }
    }
}

macro_rules! script {
    // A script in its two builds ([`Waking`]): `record.lua`, the line that names the publish command of
    // each build, then the parts given.
    (@waking $(#[$doc:meta])* $name:ident, $($part:expr),+) => {
        $(#[$doc])*
        pub static $name: Waking = Waking {
            classic: LazyLock::new(|| {
                Script::new(concat!(include_str!("record.lua"), "local publish = 'PUBLISH'\n", $($part),+))
            }),
            sharded: LazyLock::new(|| {
                Script::new(concat!(include_str!("record.lua"), "local publish = 'SPUBLISH'\n", $($part),+))
            }),
        };
    };
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!($file)));
    };
    // A script that reads or writes job records and publishes wake-ups.
    ($(#[$doc:meta])* $name:ident, record + publish + $file:literal) => {
        script!(@waking $(#[$doc])* $name, include_str!($file));
    };
    // A script that also moves jobs with a flow key: `flow.lua` (flow keys' queues and turns) before it.
    ($(#[$doc:meta])* $name:ident, record + flow + publish + $file:literal) => {
        script!(@waking $(#[$doc])* $name, include_str!("flow.lua"), include_str!($file));
    };
    // A script with parts of its own in front of it (`promote_plain.lua` and `handoff.lua` of
    // `promote.lua`), after `flow.lua`.
    ($(#[$doc:meta])* $name:ident, record + flow + publish + ($($part:literal),+) + $file:literal) => {
        script!(@waking $(#[$doc])* $name, include_str!("flow.lua"), $(include_str!($part)),+, include_str!($file));
    };
    // A script that also stores new jobs: `add.lua` after `flow.lua`.
    ($(#[$doc:meta])* $name:ident, record + flow + add + publish + $file:literal) => {
        script!(@waking $(#[$doc])* $name, include_str!("flow.lua"), include_str!("add.lua"), include_str!($file));
    };
    // A script that reads or writes job records: `record.lua`, the record's format, goes in front of it.
    ($(#[$doc:meta])* $name:ident, record + $file:literal) => {
        $(#[$doc])*
        pub static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(include_str!("record.lua"), include_str!($file)))
        });
    };
}

// One module per script: the Lua file beside its typed wrapper (partition keys in, a typed reply out).
pub mod ack;
pub mod activity_add;
pub mod balance;
pub mod cancel;
pub mod coalesce;
pub mod expire;
pub mod get;
pub mod limit;
pub mod nack;
pub mod promote;
pub mod push;
pub mod release;
pub mod reschedule;
pub mod reserve;
pub mod touch;

pub mod adopt;
pub mod bs_kick;
pub mod bs_number;
pub mod bs_numbers;
pub mod bs_release;
pub mod bs_take;
pub mod counts_prune;
pub mod dead_delete;
pub mod events_done;
pub mod events_take;
pub mod hooks_retry;
pub mod hooks_take;
pub mod lease;
pub mod repair_member;
pub mod repair_record;
pub mod requeue;
pub mod schedule_fired;
pub mod schedule_set;
pub mod topic_set;
pub mod unquarantine;

/// Every script, to load them all when a process connects: without that, the first calls of a script
/// made side by side (a timer's first pass over its partitions, a crowd of first reserves) each meet
/// NOSCRIPT and send the script's text again.
/// `sharded` picks the builds of the scripts that publish.
pub fn all(sharded: bool) -> [&'static Script; 35] {
    [
        &get::SCRIPT,
        push::SCRIPT.get(sharded),
        coalesce::SCRIPT.get(sharded),
        cancel::SCRIPT.get(sharded),
        reschedule::SCRIPT.get(sharded),
        reserve::SCRIPT.get(sharded),
        ack::SCRIPT.get(sharded),
        nack::SCRIPT.get(sharded),
        touch::SCRIPT.get(sharded),
        promote::SCRIPT.get(sharded),
        expire::SCRIPT.get(sharded),
        &topic_set::SCRIPT,
        requeue::SCRIPT.get(sharded),
        &dead_delete::SCRIPT,
        release::SCRIPT.get(sharded),
        repair_record::SCRIPT.get(sharded),
        &repair_member::SCRIPT,
        &adopt::SCRIPT,
        &balance::SCRIPT,
        &unquarantine::SCRIPT,
        &lease::SCRIPT,
        &counts_prune::SCRIPT,
        &events_take::SCRIPT,
        &events_done::SCRIPT,
        &hooks_take::SCRIPT,
        &hooks_retry::SCRIPT,
        &limit::SCRIPT,
        &schedule_set::SCRIPT,
        &schedule_fired::SCRIPT,
        &activity_add::SCRIPT,
        bs_release::SCRIPT.get(sharded),
        bs_kick::SCRIPT.get(sharded),
        &bs_number::SCRIPT,
        bs_take::SCRIPT.get(sharded),
        &bs_numbers::SCRIPT,
    ]
}

#[cfg(test)]
mod tests {
    /// Every script opens with the header that says what it touches and returns, and is loaded here.
    #[test]
    fn every_script_has_its_header_and_is_loaded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/scripts");
        let this = include_str!("mod.rs");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "lua") {
                continue;
            }
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let header: String = text
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            for part in ["KEYS[1]", "ARGV[1]", "Returns:"] {
                assert!(header.contains(part), "{name}: header lacks {part}");
            }
            if name == "record.lua" || name == "flow.lua" || name == "add.lua" {
                // Not scripts: the record's format, flow keys' moves and new jobs' adds, put in front of
                // the scripts that use them.
                assert!(this.contains(&format!("include_str!(\"{name}\")")));
            } else if name == "promote_plain.lua" || name == "handoff.lua" {
                // Not scripts: promote.lua's fast ways (plain jobs to ready, plain jobs handed), put in
                // front of it.
                let promote = std::fs::read_to_string(path.with_file_name("promote.rs")).unwrap();
                assert!(promote.contains("(\"promote_plain.lua\", \"handoff.lua\") + \"promote.lua\""));
            } else {
                // Loaded here, or (a script with its typed wrapper) in the wrapper beside it.
                let quoted = format!("\"{name}\"");
                let wrapper = std::fs::read_to_string(path.with_extension("rs")).unwrap_or_default();
                assert!(
                    this.contains(&quoted) || wrapper.contains(&quoted),
                    "{name} is not loaded"
                );
            }
            n += 1;
        }
        assert_eq!(n, 40);
        assert_eq!(super::all(false).len(), n - 5, "every script is in all()");
        // A script that publishes names its command through `publish`, so both builds work.
        for name in [
            "add",
            "coalesce",
            "promote",
            "promote_plain",
            "handoff",
            "nack",
            "expire",
            "reschedule",
            "requeue",
            "release",
            "repair_record",
            "flow",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{name}.lua")).unwrap();
            // (Or through flow.lua's `ready_add`, which publishes so.)
            assert!(
                !text.contains("'PUBLISH'") && (text.contains("redis.call(publish,") || text.contains("ready_add(")),
                "{name}.lua"
            );
        }
    }
}
