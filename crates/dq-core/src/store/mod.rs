//! The store: the only way to Redis. The connection in its three shapes ([`connection`]), the partitions
//! and which one holds a job ([`partition`]), the key names ([`keys`]), the Lua scripts, each beside its
//! typed wrapper ([`scripts`]), the group commit that lets concurrent calls share script calls
//! ([`group_commit`]), the stored layout ([`layout`]), the decoding of script answers ([`decode`]), the
//! reads of job records ([`records`]), and the few commands roles need outside a script: Redis's clock
//! ([`clock`]), the ready counts ([`ready`]), a publish on a wake channel ([`publish`]) and the
//! schedules' marks dq-timer reads ([`schedules`]).
//!
//! The commands that are not scripts, one module per concept: a partition's structures and counts
//! ([`structures`], [`counts`]), its quarantine ([`quarantine`]), what the audit reads ([`audit`]); the
//! registries of topics and schedules ([`registry`]), the dashboard's minutes ([`activity`]), dq-checker's
//! alert states ([`alerts`]), the beanstalkd protocol's hashes ([`beanstalkd`]), and what is asked of a
//! node itself ([`nodes`]).
//!
//! Everything here is the crate's own, except the key names and the partitions, which
//! docs/redis-keys.md documents for operators (and tests read): no crate outside dq-core sends a command
//! or builds a script's KEYS and ARGV. With the `testing` feature the scripts are public too, for tests
//! that build states by hand.

pub(crate) mod activity;
pub(crate) mod alerts;
pub(crate) mod audit;
pub(crate) mod beanstalkd;
mod calls;
mod clock;
pub(crate) mod connection;
pub(crate) mod counts;
pub(crate) mod decode;
pub(crate) mod group_commit;
pub mod keys;
pub(crate) mod layout;
pub(crate) mod new_record;
pub(crate) mod nodes;
mod owners;
pub mod partition;
mod publish;
pub(crate) mod quarantine;
pub(crate) mod ready;
pub(crate) mod records;
pub(crate) mod registry;
mod schedules;
#[cfg(feature = "testing")]
pub mod scripts;
#[cfg(not(feature = "testing"))]
pub(crate) mod scripts;
pub(crate) mod structures;

pub(crate) use self::calls::Store;
pub use self::connection::Node;
