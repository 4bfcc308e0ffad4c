//! Reading the configuration again on SIGHUP, the same way as at start (the `--config` file, then
//! `DQ__*`), and applying what can change without a restart.
//!
//! Each binary declares its live parts: a name for the log, the keys it covers, and how to apply them.
//! On SIGHUP the settings are read and checked; a bad configuration is logged (the error names the key)
//! and nothing changes. Otherwise every part prepares its change first, and only when all could, all are
//! applied: one part's refusal (an SMTP URL lettre cannot use) leaves the others as they were too. Every
//! changed key no part covers is named in a line of its own, as taking effect at the next restart, at
//! every SIGHUP until then. Nothing here stops or pauses the binary's work: a reload swaps values that
//! the work reads.
//!
//! The settings in force (those at start, with the live keys of the last reload) are published on a
//! watch channel ([`Reload::subscribe`]), for parts that simply read a value each round (an interval, a
//! threshold).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, Settings, changed_keys};

/// Puts a prepared change in force; it cannot fail.
pub type Commit = Box<dyn FnOnce() + Send>;

/// Prepares a part's change from the settings just read: the commit, or why the part cannot use them
/// (naming the key).
type Prepare = Box<dyn FnMut(&Settings) -> Result<Commit, String> + Send>;

/// One thing a binary applies live.
struct Part {
    /// How the log names it (`log level`, `egress policy`).
    name: &'static str,
    /// The keys it covers: a key, or a section and everything in it (`checker`).
    keys: &'static [&'static str],
    /// Makes its change ready.
    prepare: Prepare,
}

/// A binary's reload on SIGHUP: its live parts and the settings in force.
pub struct Reload {
    /// The settings in force: those at start, with the live keys of each reload since. Restart-only
    /// keys keep their start values here, so a change waiting for a restart is named at every SIGHUP.
    in_force: Settings,
    /// What is applied live.
    parts: Vec<Part>,
    /// Keys (or sections) this binary does not read: a change there is not its to report.
    unused: &'static [&'static str],
    /// The settings in force, for the parts that read them each round.
    published: watch::Sender<Arc<Settings>>,
}

/// What a reload did, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The new settings' live parts are in force.
    Applied {
        /// The parts applied, by name.
        parts: Vec<&'static str>,
        /// The live keys that changed.
        changed: Vec<String>,
        /// The changed keys that need a restart.
        restart: Vec<String>,
        /// The changed keys this binary does not read.
        ignored: Vec<String>,
    },
    /// The configuration could not be read, or a part could not use it: nothing changed.
    Refused(String),
}

impl Reload {
    /// A reload from `settings` (those the binary started with), with the one part every binary has:
    /// `log.level`.
    pub fn new(settings: &Settings) -> Reload {
        let (published, _) = watch::channel(Arc::new(settings.clone()));
        Reload {
            in_force: settings.clone(),
            parts: Vec::new(),
            unused: &[],
            published,
        }
        .apply("log level", &["log.level"], |s| {
            match crate::telemetry::set_log_level(&s.log.level) {
                crate::telemetry::LogLevelSet::RustLogWins => {
                    tracing::info!("SIGHUP: RUST_LOG is set and wins over log.level")
                }
                crate::telemetry::LogLevelSet::Applied | crate::telemetry::LogLevelSet::NotInstalled => {}
            }
        })
    }

    /// Declares keys or sections this binary does not read (dq-timer and `checker`): their changes are
    /// neither applied nor reported.
    pub fn unused(mut self, keys: &'static [&'static str]) -> Reload {
        self.unused = keys;
        self
    }

    /// A live part that may refuse the new settings: `prepare` returns the commit, or why it cannot
    /// (naming the key), in which case nothing changes.
    pub fn part(
        mut self,
        name: &'static str,
        keys: &'static [&'static str],
        prepare: impl FnMut(&Settings) -> Result<Commit, String> + Send + 'static,
    ) -> Reload {
        self.parts.push(Part {
            name,
            keys,
            prepare: Box::new(prepare),
        });
        self
    }

    /// A live part that takes any settings that passed their checks.
    pub fn apply(
        self,
        name: &'static str,
        keys: &'static [&'static str],
        apply: impl Fn(&Settings) + Send + Sync + 'static,
    ) -> Reload {
        let apply = Arc::new(apply);
        self.part(name, keys, move |s| {
            let (apply, s) = (apply.clone(), s.clone());
            Ok(Box::new(move || apply(&s)) as Commit)
        })
    }

    /// A live part read from the settings in force ([`Reload::subscribe`]) each time it is used.
    pub fn follows(self, name: &'static str, keys: &'static [&'static str]) -> Reload {
        self.apply(name, keys, |_| {})
    }

    /// The settings in force, updated by each reload. Read only the keys of a declared part from it:
    /// the others keep their start values.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Settings>> {
        self.published.subscribe()
    }

    /// Reloads on every SIGHUP until `shutdown`.
    pub fn start(mut self, shutdown: CancellationToken) -> std::io::Result<()> {
        crate::signals::on_hangup(shutdown, move || {
            let read = Settings::load(self.in_force.file.as_deref());
            self.reload(read);
        })
    }

    /// Applies `read` (the settings just read, or why they could not be) and logs what happened.
    pub fn reload(&mut self, read: Result<Settings, ConfigError>) -> Outcome {
        let outcome = self.reload_quietly(read);
        match &outcome {
            Outcome::Refused(cause) => {
                tracing::error!(%cause, "SIGHUP: cannot use the configuration; nothing changes")
            }
            Outcome::Applied {
                parts,
                changed,
                restart,
                ignored,
            } => {
                for key in restart {
                    tracing::warn!("SIGHUP: {key} changed; it takes effect at the next restart");
                }
                tracing::info!(
                    ?changed,
                    "SIGHUP: configuration read again; applied: {}",
                    parts.join(", ")
                );
                // Under the level just put in force.
                tracing::debug!(?ignored, "SIGHUP: changed keys this binary does not read");
            }
        }
        outcome
    }

    /// [`Reload::reload`] without the log lines.
    fn reload_quietly(&mut self, read: Result<Settings, ConfigError>) -> Outcome {
        let new = match read {
            Ok(s) => s,
            Err(e) => return Outcome::Refused(e.to_string()),
        };
        let mut commits = Vec::with_capacity(self.parts.len());
        for part in &mut self.parts {
            match (part.prepare)(&new) {
                Ok(commit) => commits.push(commit),
                Err(cause) => return Outcome::Refused(format!("{}: {cause}", part.name)),
            }
        }
        let (mut changed, mut restart, mut ignored) = (Vec::new(), Vec::new(), Vec::new());
        for key in changed_keys(&self.in_force, &new) {
            if self.parts.iter().any(|p| covers(p.keys, &key)) {
                changed.push(key);
            } else if covers(self.unused, &key) {
                ignored.push(key);
            } else {
                restart.push(key);
            }
        }
        for commit in commits {
            commit();
        }
        self.in_force = overlay(&self.in_force, &new, &changed);
        self.published.send_replace(Arc::new(self.in_force.clone()));
        Outcome::Applied {
            parts: self.parts.iter().map(|p| p.name).collect(),
            changed,
            restart,
            ignored,
        }
    }
}

/// Whether `key` is one of `keys` or lies in one of their sections.
fn covers(keys: &[&str], key: &str) -> bool {
    keys.iter()
        .any(|k| key == *k || key.strip_prefix(k).is_some_and(|rest| rest.starts_with('.')))
}

/// `base` with the values of `keys` taken from `new`.
fn overlay(base: &Settings, new: &Settings, keys: &[String]) -> Settings {
    let mut tree = serde_json::to_value(base).expect("settings serialize");
    let from = serde_json::to_value(new).expect("settings serialize");
    for key in keys {
        let pointer = format!("/{}", key.replace('.', "/"));
        if let (Some(slot), Some(value)) = (tree.pointer_mut(&pointer), from.pointer(&pointer)) {
            *slot = value.clone();
        }
    }
    match serde_json::from_value::<Settings>(tree) {
        Ok(mut merged) => {
            merged.file = base.file.clone();
            merged
        }
        // Cannot happen for settings that serialized; if it did, the new settings are the better guess.
        Err(e) => {
            tracing::debug!(cause = %e, "cannot merge the settings in force");
            new.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A reload with a part over `egress` that records what it was given, and one over
    /// `checker.webhook_url` that refuses `http://refused/`.
    fn reload(seen: Arc<Mutex<Vec<Vec<String>>>>) -> Reload {
        Reload::new(&Settings::default())
            .unused(&["server", "beanstalkd"])
            .apply("egress policy", &["egress"], move |s| {
                seen.lock().unwrap().push(s.egress.deny.clone())
            })
            .part("alert channels", &["checker.webhook_url"], |s| {
                match s.checker.webhook_url.as_deref() {
                    Some("http://refused/") => Err("checker.webhook_url: refused".into()),
                    _ => Ok(Box::new(|| ()) as Commit),
                }
            })
    }

    #[test]
    fn live_keys_apply_and_restart_keys_are_named_until_a_restart() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut reload = reload(seen.clone());
        let mut in_force = reload.subscribe();
        let mut new = Settings::default();
        new.egress.deny = vec!["10.0.0.0/8".into()];
        new.log.level = "debug".into();
        new.redis.urls = vec!["redis://:secret@10.0.0.1:6379".into()];
        new.server.listen = "127.0.0.1:7000".into();
        let outcome = reload.reload(Ok(new.clone()));
        assert_eq!(
            outcome,
            Outcome::Applied {
                parts: vec!["log level", "egress policy", "alert channels"],
                changed: vec!["egress.deny".into(), "log.level".into()],
                restart: vec!["redis.urls".into()],
                ignored: vec!["server.listen".into()],
            }
        );
        assert_eq!(*seen.lock().unwrap(), [vec!["10.0.0.0/8".to_string()]]);
        assert!(in_force.has_changed().unwrap());
        let published = in_force.borrow_and_update().clone();
        assert_eq!(published.egress.deny, ["10.0.0.0/8"]);
        assert_eq!(published.log.level, "debug");
        assert_eq!(
            published.redis.urls,
            Settings::default().redis.urls,
            "a restart-only key keeps its value in force"
        );
        let Outcome::Applied { changed, restart, .. } = reload.reload(Ok(new)) else {
            panic!("refused");
        };
        assert!(changed.is_empty(), "{changed:?}");
        assert_eq!(restart, ["redis.urls"], "named again until a restart");
    }

    #[test]
    fn a_bad_configuration_or_a_refusing_part_changes_nothing() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut reload = reload(seen.clone());
        let bad = Settings::load_from(None, [("DQ__EGRESS__DENY".to_string(), "intranet".to_string())]);
        let Outcome::Refused(cause) = reload.reload(bad) else {
            panic!("applied");
        };
        assert!(cause.contains("egress.deny"), "{cause}");
        let mut new = Settings::default();
        new.egress.deny = vec!["10.0.0.0/8".into()];
        new.checker.webhook_url = Some("http://refused/".into());
        let Outcome::Refused(cause) = reload.reload(Ok(new)) else {
            panic!("applied");
        };
        assert!(cause.contains("checker.webhook_url"), "{cause}");
        assert!(seen.lock().unwrap().is_empty(), "no part applied");
        assert!(!reload.subscribe().has_changed().unwrap());
        assert!(reload.in_force.egress.deny.is_empty());
    }

    #[test]
    fn keys_cover_their_sections_only_at_a_dot() {
        assert!(covers(&["checker"], "checker.webhook_url"));
        assert!(covers(&["log.level"], "log.level"));
        assert!(!covers(&["checker"], "checkers.x"));
        assert!(!covers(&["log.level"], "log.format"));
    }
}
