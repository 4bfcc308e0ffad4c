//! The timer's moves: promote due jobs (reserving some for waiting dq-consumer workers), end expired
//! reservations, balance the partitions among timers ([`moves`]), and the schedules' firing
//! ([`schedules`]).

pub(crate) mod moves;
pub(crate) mod schedules;

pub use self::moves::{Balance, Expired, Promoted, TracedMove};

crate::shared::role!(
    /// What dq-timer does. From [`crate::Queue::timer`].
    Timer
);
