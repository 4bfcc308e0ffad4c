//! The producer: push (one job or many, with the group commit that lets concurrent pushes share script
//! calls), look up (a job, and its attempts), cancel and reschedule.

pub(crate) mod attempts;
pub(crate) mod coalesce;
pub(crate) mod jobs;
pub(crate) mod push;
pub(crate) mod validate;

crate::shared::role!(
    /// What producers do: store jobs, look them up, cancel and reschedule them. From [`crate::Queue::producer`].
    Producer
);
