//! dq-checker's work on Redis: leases so that one checker alerts once ([`alerting`]), the events it
//! sends, the hooks of `callback.on_dead_url` ([`dead_hooks`]), pruning, and the consistency audit and
//! repair ([`audit`]).

pub mod alerting;
pub mod audit;
pub mod dead_hooks;
pub mod migrate;
pub mod nodes;
pub mod prune;

pub use self::dead_hooks::DeadHook;

crate::shared::role!(
    /// What dq-checker does. From [`crate::Queue::checker`].
    Checker
);
