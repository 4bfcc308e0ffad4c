//! The requests these benchmarks send again and again, built once per call from dq-api's types, and the
//! reserve answer they read (its bodies left as the server wrote them). Shared by `due` and
//! `reserve_ack`, so neither imports the other.

use bytes::Bytes;
use dq_api::{AckEntry, AckManyRequest, AckRequest, ReserveRequest};
use serde_json::value::RawValue;

/// A reserve answer, its bodies left unparsed.
pub type ReserveReply<'a> = dq_api::ReserveAnswer<&'a RawValue>;

/// The reserve request for one topic.
pub fn reserve_body(topic: &str, count: u32, timeout_ms: u64) -> Bytes {
    let request = ReserveRequest::new([topic]).count(count).wait_ms(timeout_ms);
    Bytes::from(serde_json::to_vec(&request).expect("a reserve request always serializes"))
}

/// The ack request for a reservation.
pub fn ack_body(receipt: &str) -> Bytes {
    let request = AckRequest {
        receipt: receipt.to_string(),
        consumer: None,
        push: None,
    };
    Bytes::from(serde_json::to_vec(&request).expect("an ack always serializes"))
}

/// The ack-many request for reserved jobs (`AckEntry::from` a reservation):
/// `{"acks":[{"id","receipt"}…]}`.
pub fn ack_many_body(acks: &[AckEntry]) -> Bytes {
    let request = AckManyRequest { acks: acks.to_vec() };
    Bytes::from(serde_json::to_vec(&request).expect("an ack always serializes"))
}
