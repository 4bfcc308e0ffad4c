//! The quarantine: job records that could not be decoded, moved out of the way by the scripts
//! (`record.lua`) so that everything else keeps moving (invariant 9); listed, dropped and restored by
//! operators (`dq-checker quarantine`).

use super::Admin;
use crate::error::{Error, Result};
use crate::store::quarantine;
use crate::store::scripts::unquarantine::{self, UnquarantineReply};

/// A quarantined record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Quarantined {
    /// The partition it belongs to.
    pub partition: u16,
    /// The job's id.
    pub id: String,
    /// When it was quarantined (Unix ms, Redis clock).
    pub at: i64,
    /// The structure the id was found in, when the script that met it knew (a delay set, ready queue,
    /// reserved set or dead list key).
    pub source: Option<String>,
    /// Its score there, when known.
    pub score: Option<String>,
    /// The record's bytes as they were.
    #[serde(with = "hex_bytes")]
    pub raw: Vec<u8>,
}

mod hex_bytes {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }
}

impl Quarantined {
    /// Parses a quarantine entry: `"<Unix ms> <score> <source>\n"` and the raw bytes.
    fn parse(partition: u16, id: String, entry: &[u8]) -> Option<Self> {
        let nl = entry.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&entry[..nl]).ok()?;
        let mut parts = head.splitn(3, ' ');
        let at = parts.next()?.parse().ok()?;
        let known = |s: &str| (s != "-").then(|| s.to_string());
        let score = known(parts.next()?);
        let source = known(parts.next()?);
        Some(Quarantined {
            partition,
            id,
            at,
            source,
            score,
            raw: entry[nl + 1..].to_vec(),
        })
    }
}

impl Admin {
    /// Every quarantined record, partition by partition (all of them asked at once).
    pub async fn quarantined(&self) -> Result<Vec<Quarantined>> {
        let reads = self
            .partitions
            .all()
            .map(|p| async move { (p, quarantine::entries(&self.store, p).await) });
        let mut out = Vec::new();
        for (p, entries) in futures_util::future::join_all(reads).await {
            for (id, entry) in entries? {
                match Quarantined::parse(p, id.clone(), &entry) {
                    Some(q) => out.push(q),
                    None => tracing::warn!(partition = p, %id, "a quarantine entry that dq did not write"),
                }
            }
        }
        Ok(out)
    }

    /// How many records are quarantined, over the partitions that answer (all asked at once, so a
    /// node that is down costs one timeout, not one per partition).
    pub async fn quarantined_count(&self) -> u64 {
        let reads = self
            .partitions
            .all()
            .map(|p| async move { quarantine::len(&self.store, p).await.unwrap_or(0) });
        futures_util::future::join_all(reads).await.into_iter().sum()
    }

    /// Deletes a quarantined record for good; whether it was there.
    pub async fn drop_quarantined(&self, id: &str) -> Result<bool> {
        quarantine::remove(&self.store, self.partitions.of_id(id), id).await
    }

    /// Puts a quarantined record back as the job's record, and its id in the structure it was found in
    /// (when known). A record that still cannot be decoded is quarantined again at its next read.
    pub async fn restore_quarantined(&self, id: &str) -> Result<()> {
        match unquarantine::call(&self.store, self.partitions.of_id(id), id).await? {
            UnquarantineReply::Restored => Ok(()),
            UnquarantineReply::NotQuarantined => Err(Error::NotFound(id.to_string())),
            UnquarantineReply::HasRecord => Err(Error::Conflict(format!(
                "job `{id}` has a record again; drop the quarantined one"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_with_any_bytes() {
        let entry = b"1795000000000 1795000000123 dq:{3.7}:delayed\n\x00\xff\x01garbage";
        let q = Quarantined::parse(3, "a".into(), entry).unwrap();
        assert_eq!(q.at, 1795000000000);
        assert_eq!(q.score.as_deref(), Some("1795000000123"));
        assert_eq!(q.source.as_deref(), Some("dq:{3.7}:delayed"));
        assert_eq!(q.raw, b"\x00\xff\x01garbage");
        let q = Quarantined::parse(3, "b".into(), b"5 - -\n").unwrap();
        assert_eq!((q.source, q.score, q.raw.len()), (None, None, 0));
        assert!(Quarantined::parse(3, "c".into(), b"no newline").is_none());
    }
}
