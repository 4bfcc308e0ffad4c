//! Administration: the topic registry ([`topics`]), dead letters ([`dead`]), schedules
//! ([`schedules`]), counts and health ([`stats`]), browsing jobs ([`browse`]), quarantined records
//! ([`quarantine`]) and the dashboard's activity ([`activity`]).

pub mod activity;
pub mod browse;
pub mod dead;
pub mod quarantine;
pub mod schedules;
pub mod stats;
pub mod topics;

pub use self::browse::JobPage;
pub use self::quarantine::Quarantined;
pub use self::stats::{NodeStats, NodeWatch, Stats};
pub use self::topics::{TopicCache, Topics};

crate::shared::role!(
    /// What admins do (the admin API and pages). From [`crate::Queue::admin`].
    Admin
);
