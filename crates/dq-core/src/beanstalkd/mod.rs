//! The beanstalkd protocol's names for dq's things: job numbers for ids, tube names for topics.
//!
//! **Numbers.** beanstalkd's clients know a job by a positive integer. A number is taken from a
//! partition's sequence (`<prefix>:{<tag>}:bs:seq`): the k-th of partition p (of P) is
//! `(k - 1) * P + p + 1`, so numbers are unique per installation, count 1, 2, 3 … with one partition,
//! and every number names its partition (`(n - 1) mod P`). A job put over the protocol gets the id
//! [`id_of_number`]: its number in Crockford's base 32, 23 characters, then the three characters that
//! put it in that partition (a server-made id's form, see [`crate::store::partition`]). So the id is found from
//! the number with no index, and ids sort as numbers do, which orders jobs of one priority by number in
//! a ready queue, and across ready queues when a reserve compares their first jobs (dq-server hands out
//! numbers that rise in its put order across partitions, see `bs_numbers.lua`). A job pushed over HTTP gets a number when the protocol first shows it
//! (`bs_number.lua`), kept in its record and in the partition's number index.
//!
//! **Tubes.** Every topic name is a valid tube name and is its own tube. A tube name that is not a
//! topic name (it has `+ / ; $ ( )`, or is longer than 128 bytes) or that starts with `bs-` is kept as
//! the topic [`topic_of_tube`] makes: `bs-`, the name with each other character as `_`, cut to 96, `-`,
//! and 16 hex digits of a hash of the whole name; `{<prefix>}:bs:tubes` maps it back.
//!
//! The role [`Beanstalkd`] holds what the protocol listener (dq-server) does on Redis beyond the API's
//! verbs: numbers, jobs by number, release and bury, kick, tubes and their pauses ([`jobs`]).

pub mod jobs;
pub mod names;
pub mod tubes;

pub use self::jobs::{BsJob, Released};
pub use self::names::{
    MAX_TUBE_NAME, home_partition, id_of_number, is_made_topic, is_tube_name, number, number_of_id,
    partition_of_number, topic_of_tube,
};

crate::shared::role!(
    /// What the beanstalkd protocol listener does. From [`crate::Queue::beanstalkd`].
    Beanstalkd
);
