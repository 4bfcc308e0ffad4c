//! The store: the only way to Redis. The connection in its three shapes ([`connection`]), the partitions
//! and which one holds a job ([`partition`]), the key names ([`keys`]), the Lua scripts with their typed
//! wrappers ([`scripts`]), the group commit that lets concurrent calls share script calls ([`coalesce`]),
//! the stored layout ([`layout`]) and the decoding of script answers ([`decode`]).

pub mod coalesce;
pub mod connection;
pub(crate) mod decode;
pub mod keys;
pub(crate) mod layout;
pub mod partition;
pub(crate) mod records;
pub mod scripts;
