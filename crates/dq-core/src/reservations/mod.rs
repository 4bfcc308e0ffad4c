//! Reservations: reserve ready jobs (pull consumers and dq-consumer's workers), and settle them in one
//! place: ack ([`ack`], with its group commit), nack, touch and release ([`settle`]); the ready index
//! that sends reserves straight to the partitions with ready jobs ([`ready`]); a topic's delivery limits
//! across consumers ([`limit`]); and the hand-offs of promoted jobs to waiting workers ([`handoff`]).

pub(crate) mod ack;
pub mod handoff;
pub mod limit;
pub mod ready;
pub(crate) mod reserve;
pub(crate) mod settle;

pub use self::ack::Success;
pub use self::handoff::Waiting;
pub use self::limit::{LimitAsk, LimitGrant};
pub use self::ready::ReadyIndex;
pub use self::reserve::ReserveOptions;
pub use self::settle::Failure;

crate::shared::role!(
    /// What consumers do: reserve jobs and settle their reservations. From [`crate::Queue::reservations`].
    Reservations
);

impl Reservations {
    /// The index of partitions with ready jobs that reserves in this process follow; long polls wait in
    /// its lines ([`ReadyIndex::waiter`]).
    pub fn ready_index(&self) -> &std::sync::Arc<ReadyIndex> {
        &self.ready
    }
}
