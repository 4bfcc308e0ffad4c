//! Where deliveries may go: HTTP clients whose resolver applies the egress policy to every address a
//! callback's name resolves to, at connect time. They live in [`dq_core::egress::client`], shared with
//! dq-checker's dead-job hooks; this module names them where the consumer uses them.

pub use dq_core::egress::{CannotCall, Egress, NameRefused};
