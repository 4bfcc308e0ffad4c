//! The Lua scripts, one file per atomic operation under `src/lua/`, each loaded once and run by EVALSHA.
//!
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (a restarted or failed-over Redis), loads the script and
//! retries; no script text is ever built from runtime values (invariant 7).
//!
//! Every script touches the keys of one partition only, so it runs in one Redis Cluster slot: in the
//! headers, `<prefix>` of a job's keys is the partition's prefix `<prefix>:{<tag>}` (see [`crate::keys`]).
//! The exception is `balance.lua`, whose keys are the timers' own (`{<prefix>}:…`, one slot too).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
    // A script that reads or writes job records: `record.lua`, the record's format, goes in front of it.
    ($(#[$doc:meta])* $name:ident, record + $file:literal) => {
        $(#[$doc])*
        pub static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(include_str!("lua/record.lua"), include_str!(concat!("lua/", $file))))
        });
    };
}

script!(
    /// Read job records (look up, the dead list's pages, the audit).
    GET,
    record + "get.lua"
);
script!(
    /// Store new jobs (push and push many).
    PUSH,
    record + "push.lua"
);
script!(
    /// Remove a job from any state.
    DELETE,
    record + "delete.lua"
);
script!(
    /// Give a delayed or ready job a new due time.
    RESCHEDULE,
    record + "reschedule.lua"
);
script!(
    /// Reserve ready jobs over topics in priority order.
    RESERVE,
    record + "reserve.lua"
);
script!(
    /// Finish a reservation.
    ACK,
    record + "ack.lua"
);
script!(
    /// Fail a reservation: back off, or dead.
    NACK,
    record + "nack.lua"
);
script!(
    /// Extend a reservation.
    TOUCH,
    record + "touch.lua"
);
script!(
    /// Move due jobs of one bucket to ready (the timer).
    PROMOTE,
    record + "promote.lua"
);
script!(
    /// End expired reservations (the timer).
    EXPIRE,
    record + "expire.lua"
);

script!(
    /// Write a topic's registration on one shard unless it holds a newer one.
    TOPIC_SET,
    "topic_set.lua"
);
script!(
    /// Dead jobs back to ready.
    REQUEUE,
    record + "requeue.lua"
);
script!(
    /// Delete dead jobs.
    PURGE,
    "purge.lua"
);
script!(
    /// Hand a reservation back unfinished (drain).
    RELEASE,
    record + "release.lua"
);
script!(
    /// Put an orphaned job record back in its ready queue (the audit).
    REPAIR_RECORD,
    record + "repair_record.lua"
);
script!(
    /// Drop an id that has no job record from a structure (the audit).
    REPAIR_MEMBER,
    "repair_member.lua"
);
script!(
    /// Take in one job converted from the shard layout (dq-checker migrate).
    ADOPT,
    "adopt.lua"
);
script!(
    /// A timer's heartbeat: claim its fair share of partitions (the timer).
    BALANCE,
    "balance.lua"
);

/// Every script, to load them all when a process connects: without that, the first calls of a script
/// made side by side (a timer's first pass over its partitions, a crowd of first reserves) each meet
/// NOSCRIPT and send the script's text again.
pub fn all() -> [&'static Script; 18] {
    [
        &GET,
        &PUSH,
        &DELETE,
        &RESCHEDULE,
        &RESERVE,
        &ACK,
        &NACK,
        &TOUCH,
        &PROMOTE,
        &EXPIRE,
        &TOPIC_SET,
        &REQUEUE,
        &PURGE,
        &RELEASE,
        &REPAIR_RECORD,
        &REPAIR_MEMBER,
        &ADOPT,
        &BALANCE,
    ]
}

#[cfg(test)]
mod tests {
    /// Every script opens with the header that says what it touches and returns, and is loaded here.
    #[test]
    fn every_script_has_its_header_and_is_loaded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let this = include_str!("scripts.rs");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
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
            if name == "record.lua" {
                // Not a script: the record's format, put in front of the scripts that use records.
                assert!(this.contains("include_str!(\"lua/record.lua\")"));
            } else {
                assert!(this.contains(&format!("\"{name}\"")), "{name} is not loaded");
            }
            n += 1;
        }
        assert_eq!(n, 19);
        assert_eq!(super::all().len(), n - 1, "every script is in all()");
    }
}
