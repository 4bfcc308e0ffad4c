//! dq-checker's work on Redis: leases so that one checker alerts once ([`alerting`]), the events it
//! sends, the hooks of `callback.on_dead_url` and `callback.on_success_url` ([`hooks`]), pruning, and the
//! consistency audit and
//! repair ([`audit`]).

pub mod alerting;
pub mod audit;
pub mod hooks;
pub mod migrate;
pub mod nodes;
pub mod prune;

pub use self::hooks::{Hook, HookKind};

crate::shared::role!(
    /// What dq-checker does. From [`crate::Queue::checker`].
    Checker
);
