//! When a schedule's occurrences fall: its cron pattern in its time zone, and the missed-occurrence policy.
//!
//! Why croner + chrono-tz: croner is maintained, parses the standard 5-field pattern and the 6-field one
//! with seconds first with the same parser (`cron` requires the seconds field), follows Vixie cron's
//! day-of-month OR day-of-week rule, and states what it does across daylight-saving transitions (below);
//! chrono-tz carries the IANA database in the binary, so a zone means the same on every machine whatever
//! its `/usr/share/zoneinfo`.
//!
//! Daylight saving, as croner does it (the tests pin each case down in Europe/Berlin):
//! - A pattern with a wildcard or step in its seconds, minutes or hours (an interval job, e.g. every
//!   minute) fires at every matching instant: in the hour that is skipped in spring there is none, in the
//!   hour repeated in autumn it fires in both passes. Every minute stays every minute in absolute time.
//! - A pattern fixed in its time of day (e.g. `30 2 * * *`) fires once a day: on the day spring skips
//!   02:30 it fires at the first instant after the gap (03:00 summer time); on the day autumn repeats
//!   02:30 it fires at the first 02:30 (summer time) only.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::{Error, Result};
use crate::job::shorten;

/// A schedule's parsed cron pattern and time zone.
#[derive(Debug, Clone)]
pub struct Cadence {
    /// The pattern: 5 fields, or 6 with seconds first.
    cron: Cron,
    /// The IANA zone the pattern's wall-clock times are read in.
    zone: Tz,
}

impl Cadence {
    /// Parses `cron` (5 fields, or 6 with seconds first) in the IANA zone `timezone`. A pattern that never
    /// matches (`0 0 30 2 *`) is refused too: it would never fire.
    pub fn parse(cron: &str, timezone: &str) -> Result<Self> {
        let zone: Tz = timezone.parse().map_err(|_| {
            Error::Invalid(format!(
                "`timezone` `{}` is not an IANA time zone (e.g. `UTC`, `Europe/Berlin`)",
                shorten(timezone)
            ))
        })?;
        let bad = |why: String| {
            Error::Invalid(format!(
                "`cron` `{}` is not a valid pattern (5 fields, or 6 with seconds first): {why}",
                shorten(cron)
            ))
        };
        let fields = cron.split_whitespace().count();
        if !(cron.trim_start().starts_with('@') || fields == 5 || fields == 6) {
            return Err(bad(format!("it has {fields} fields")));
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| bad(e.to_string()))?;
        let cadence = Cadence { cron: parsed, zone };
        if cadence.next_after(0).is_none() {
            return Err(bad("it never matches".into()));
        }
        Ok(cadence)
    }

    /// The zone's name.
    pub fn zone(&self) -> &'static str {
        self.zone.name()
    }

    fn at(&self, ms: i64) -> Option<DateTime<Tz>> {
        // Occurrences fall on whole seconds: the second `ms` is in stands for it.
        self.zone.timestamp_opt(ms.div_euclid(1000), 0).single()
    }

    /// The first occurrence strictly after `ms` (Unix ms), if any before the year 5000.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let next = self.cron.find_next_occurrence(&self.at(ms)?, false).ok()?;
        Some(next.timestamp_millis())
    }

    /// The last occurrence at or before `ms`, if any.
    pub fn latest_until(&self, ms: i64) -> Option<i64> {
        let last = self.cron.find_previous_occurrence(&self.at(ms)?, true).ok()?;
        Some(last.timestamp_millis())
    }

    /// The occurrence to fire next, given that every occurrence up to `fired_through` has fired (or does
    /// not count: before the schedule's creation or resume), and that it is `now` (both Unix ms, Redis's
    /// clock). When occurrences were missed (the timers were down), only the latest of them: the answer is
    /// then at or before `now`, to fire at once. Otherwise the next one, in the future.
    pub fn next_fire(&self, fired_through: i64, now: i64) -> Option<i64> {
        let next = self.next_after(fired_through)?;
        if next > now {
            return Some(next);
        }
        // Missed: never a storm, only the latest one (it is at least `next`, so after `fired_through`).
        Some(self.latest_until(now).filter(|l| *l > fired_through).unwrap_or(next))
    }
}

/// `ms` (Unix ms) as an RFC 3339 time in UTC, for pages and logs.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).map_or_else(|| ms.to_string(), |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}
