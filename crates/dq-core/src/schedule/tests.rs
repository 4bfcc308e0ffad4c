//! Occurrences with an injected clock: 5- and 6-field patterns, daylight-saving transitions in
//! Europe/Berlin, the missed-occurrence policy, and the checks on a registration.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;

use super::*;

/// Unix ms of an RFC 3339 time.
fn ms(t: &str) -> i64 {
    DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis()
}

/// The first `n` occurrences after `from`.
fn after(c: &Cadence, from: &str, n: usize) -> Vec<i64> {
    let mut at = ms(from);
    (0..n)
        .map(|_| {
            at = c.next_after(at).unwrap();
            at
        })
        .collect()
}

fn utc(list: &[&str]) -> Vec<i64> {
    list.iter().map(|t| ms(t)).collect()
}

/// Wall-clock times in Berlin, with the offset in force.
fn berlin(list: &[i64]) -> Vec<String> {
    let tz: Tz = "Europe/Berlin".parse().unwrap();
    list.iter()
        .map(|m| tz.timestamp_millis_opt(*m).unwrap().format("%H:%M%:z").to_string())
        .collect()
}

#[test]
fn five_fields_are_minutes() {
    let c = Cadence::parse("*/15 * * * *", "UTC").unwrap();
    assert_eq!(
        after(&c, "2024-05-01T10:07:30Z", 3),
        utc(&["2024-05-01T10:15:00Z", "2024-05-01T10:30:00Z", "2024-05-01T10:45:00Z"])
    );
    // Strictly after: an occurrence itself is not its own next.
    assert_eq!(
        c.next_after(ms("2024-05-01T10:15:00Z")),
        Some(ms("2024-05-01T10:30:00Z"))
    );
    assert_eq!(
        c.next_after(ms("2024-05-01T10:14:59.999Z")),
        Some(ms("2024-05-01T10:15:00Z"))
    );
}

#[test]
fn six_fields_have_seconds_first() {
    let c = Cadence::parse("*/20 * * * * *", "UTC").unwrap();
    assert_eq!(
        after(&c, "2024-05-01T10:00:00.500Z", 4),
        utc(&[
            "2024-05-01T10:00:20Z",
            "2024-05-01T10:00:40Z",
            "2024-05-01T10:01:00Z",
            "2024-05-01T10:01:20Z"
        ])
    );
    let daily = Cadence::parse("30 0 9 * * MON-FRI", "UTC").unwrap();
    // 2024-05-03 is a Friday: the next is Monday.
    assert_eq!(after(&daily, "2024-05-03T09:00:31Z", 1), utc(&["2024-05-06T09:00:30Z"]));
}

#[test]
fn zones_move_wall_clock_times() {
    let c = Cadence::parse("0 9 * * *", "America/New_York").unwrap();
    assert_eq!(after(&c, "2024-07-01T00:00:00Z", 1), utc(&["2024-07-01T13:00:00Z"]));
    assert_eq!(c.zone(), "America/New_York");
}

#[test]
fn every_minute_across_spring_forward_in_berlin() {
    // 2024-03-31 02:00 CET the clocks jump to 03:00 CEST (01:00Z).
    let c = Cadence::parse("* * * * *", "Europe/Berlin").unwrap();
    let got = after(&c, "2024-03-31T00:57:00Z", 4);
    assert_eq!(
        got,
        utc(&[
            "2024-03-31T00:58:00Z",
            "2024-03-31T00:59:00Z",
            "2024-03-31T01:00:00Z",
            "2024-03-31T01:01:00Z"
        ])
    );
    assert_eq!(
        berlin(&got),
        ["01:58+01:00", "01:59+01:00", "03:00+02:00", "03:01+02:00"]
    );
}

#[test]
fn every_minute_across_fall_back_in_berlin() {
    // 2024-10-27 03:00 CEST the clocks go back to 02:00 CET (01:00Z): 02:00-02:59 comes twice, and an
    // interval pattern fires in both passes.
    let c = Cadence::parse("* * * * *", "Europe/Berlin").unwrap();
    let got = after(&c, "2024-10-27T00:57:00Z", 5);
    assert_eq!(
        got,
        utc(&[
            "2024-10-27T00:58:00Z",
            "2024-10-27T00:59:00Z",
            "2024-10-27T01:00:00Z",
            "2024-10-27T01:01:00Z",
            "2024-10-27T01:02:00Z"
        ])
    );
    assert_eq!(
        berlin(&got),
        [
            "02:58+02:00",
            "02:59+02:00",
            "02:00+01:00",
            "02:01+01:00",
            "02:02+01:00"
        ]
    );
}

#[test]
fn a_fixed_time_in_the_skipped_hour_fires_after_the_gap() {
    let c = Cadence::parse("30 2 * * *", "Europe/Berlin").unwrap();
    let got = after(&c, "2024-03-30T00:00:00Z", 3);
    assert_eq!(
        got,
        utc(&["2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"])
    );
    assert_eq!(berlin(&got), ["02:30+01:00", "03:00+02:00", "02:30+02:00"]);
}

#[test]
fn a_fixed_time_in_the_repeated_hour_fires_once() {
    let c = Cadence::parse("30 2 * * *", "Europe/Berlin").unwrap();
    let got = after(&c, "2024-10-26T00:00:00Z", 3);
    assert_eq!(
        got,
        utc(&["2024-10-26T00:30:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"])
    );
    assert_eq!(berlin(&got), ["02:30+02:00", "02:30+02:00", "02:30+01:00"]);
}

#[test]
fn missed_occurrences_fire_once_the_latest() {
    let c = Cadence::parse("* * * * *", "UTC").unwrap();
    let now = ms("2024-05-01T10:00:42.300Z");
    // Last fired a day ago: of the 1440 missed, only the latest, at once.
    let fired = ms("2024-04-30T10:00:00Z");
    assert_eq!(c.next_fire(fired, now), Some(ms("2024-05-01T10:00:00Z")));
    // Once that is fired, the next is in the future: no second catch-up.
    assert_eq!(
        c.next_fire(ms("2024-05-01T10:00:00Z"), now),
        Some(ms("2024-05-01T10:01:00Z"))
    );
    // On time: the next occurrence, not yet due.
    assert_eq!(
        c.next_fire(ms("2024-05-01T10:00:10Z"), now),
        Some(ms("2024-05-01T10:01:00Z"))
    );
    // Exactly due.
    assert_eq!(
        c.next_fire(ms("2024-05-01T09:59:00Z"), ms("2024-05-01T10:00:00Z")),
        Some(ms("2024-05-01T10:00:00Z"))
    );
}

#[test]
fn a_new_schedule_starts_after_its_creation() {
    let c = Cadence::parse("0 * * * *", "UTC").unwrap();
    // Created at 10:20 (since): nothing missed, the first is 11:00.
    let since = ms("2024-05-01T10:20:00Z");
    assert_eq!(c.next_fire(since, since + 5), Some(ms("2024-05-01T11:00:00Z")));
}

fn config(json: &str) -> ScheduleConfig {
    serde_json::from_str(json).unwrap()
}

#[test]
fn a_registration_is_checked_like_a_push() {
    let limits = Limits::default();
    let ok = config(r#"{"cron":"*/5 * * * *","topic":"reports","body":{"a":1}}"#);
    assert_eq!(ok.timezone, "UTC");
    assert!(ok.validate("nightly", &limits).is_ok());
    let big = format!(r#"{{"cron":"* * * * *","topic":"t","body":"{}"}}"#, "x".repeat(70_000));
    for (name, json, says) in [
        ("n", r#"{"cron":"nope","topic":"t","body":1}"#, "`cron`"),
        ("n", r#"{"cron":"* * * *","topic":"t","body":1}"#, "`cron`"),
        ("n", r#"{"cron":"0 0 * * * * 2030","topic":"t","body":1}"#, "`cron`"),
        ("n", r#"{"cron":"61 * * * *","topic":"t","body":1}"#, "`cron`"),
        ("n", r#"{"cron":"0 0 30 2 *","topic":"t","body":1}"#, "never"),
        (
            "n",
            r#"{"cron":"* * * * *","timezone":"Mars/Olympus","topic":"t","body":1}"#,
            "`timezone`",
        ),
        (
            "bad name",
            r#"{"cron":"* * * * *","topic":"t","body":1}"#,
            "schedule name",
        ),
        ("n", r#"{"cron":"* * * * *","topic":"a b","body":1}"#, "topic"),
        ("n", r#"{"cron":"* * * * *","topic":"t","body":1,"ttr_ms":1}"#, "ttr_ms"),
        (
            "n",
            r#"{"cron":"* * * * *","topic":"t","body":1,"max_attempts":-1}"#,
            "max_attempts",
        ),
        (
            "n",
            r#"{"cron":"* * * * *","topic":"t","body":1,"priority":4294967296}"#,
            "priority",
        ),
        ("n", &big, "`body`"),
    ] {
        let err = config(json).validate(name, &limits).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{json}: {err:?}");
        assert!(err.to_string().contains(says), "{json}: {err}");
    }
    assert!(
        serde_json::from_str::<ScheduleConfig>(r#"{"cron":"* * * * *","topic":"t","body":1,"delay_ms":5}"#).is_err()
    );
}

#[test]
fn a_schedules_priority_goes_into_its_jobs() {
    let c = config(r#"{"cron":"* * * * *","topic":"t","body":1,"priority":3}"#);
    assert_eq!(c.push_request("n", 60_000).priority, Some(3));
    assert_eq!(
        config(r#"{"cron":"* * * * *","topic":"t","body":1}"#)
            .push_request("n", 0)
            .priority,
        None
    );
}

#[test]
fn job_ids_carry_the_occurrence_and_fit() {
    assert_eq!(job_id("nightly", 1_700_000_000_000), "nightly:1700000000000");
    let long = "n".repeat(128);
    let id = job_id(&long, 1_700_000_000_000);
    crate::job::validate_id(&id).unwrap();
    assert!(
        id.starts_with(&"n".repeat(80)) && id.ends_with(":1700000000000"),
        "{id}"
    );
    assert_ne!(id, job_id(&format!("{}m", "n".repeat(127)), 1_700_000_000_000));
    crate::job::validate_id(&job_id(&"x".repeat(96), i64::MAX)).unwrap();
}
