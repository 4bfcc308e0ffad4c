//! The Lua scripts, one file per atomic operation under `src/lua/`, each loaded once and run by EVALSHA.
//!
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (a restarted or failed-over Redis), loads the script and
//! retries; no script text is ever built from runtime values (invariant 7).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

script!(
    /// Store new jobs (push and push many).
    PUSH,
    "push.lua"
);
script!(
    /// Remove a job from any state.
    DELETE,
    "delete.lua"
);
script!(
    /// Give a delayed or ready job a new due time.
    RESCHEDULE,
    "reschedule.lua"
);
script!(
    /// Reserve ready jobs over topics in priority order.
    RESERVE,
    "reserve.lua"
);
script!(
    /// Finish a reservation.
    ACK,
    "ack.lua"
);
script!(
    /// Fail a reservation: back off, or dead.
    NACK,
    "nack.lua"
);
script!(
    /// Extend a reservation.
    TOUCH,
    "touch.lua"
);
script!(
    /// Move due jobs of one bucket to ready (the timer).
    PROMOTE,
    "promote.lua"
);
script!(
    /// End expired reservations (the timer).
    EXPIRE,
    "expire.lua"
);

/// Every script, for loading them all up front (e.g. to measure one with `redis-benchmark EVALSHA`).
pub fn all() -> [&'static Script; 9] {
    [
        &PUSH,
        &DELETE,
        &RESCHEDULE,
        &RESERVE,
        &ACK,
        &NACK,
        &TOUCH,
        &PROMOTE,
        &EXPIRE,
    ]
}
