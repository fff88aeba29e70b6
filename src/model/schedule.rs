//! Recurring schedules: what a schedule is, and the pure arithmetic of its
//! nominal times (cron expressions in a time zone, or fixed intervals).
//!
//! Cron expressions are parsed by `croner` and matched against *local* wall
//! clock times; `chrono-tz` (the IANA database) turns each local time into
//! an instant. That split is what gives daylight saving time its rules: a
//! local time that does not exist that day (spring forward) matches no
//! instant and is not run; a local time that happens twice (fall back) is
//! run once, at its first occurrence.

use bytes::Bytes;
use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// Attribute naming the schedule that published a message.
pub const SCHEDULE_ATTRIBUTE: &str = "redq-schedule";
/// Attribute holding a run's nominal time, RFC 3339 in UTC with `Z`.
pub const SCHEDULED_TIME_ATTRIBUTE: &str = "redq-scheduled-time";
/// Most catch-up runs one schedule may ask for: each is a message written
/// by one script call.
pub const MAX_CATCH_UP: u32 = 1000;

/// What a schedule's runs publish: a message without a due time or dedupe id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleMessage {
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
}

/// A schedule as its owner sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    /// The cron expression as given; empty when `every` is set.
    pub cron: String,
    pub every: Option<Duration>,
    /// IANA name; empty means UTC.
    pub time_zone: String,
    pub message: ScheduleMessage,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    pub paused: bool,
    /// Missed runs published at most when a replica finds them (at least 1).
    pub catch_up: u32,
}

/// What the runs so far left: the next nominal time not yet run, the
/// latest published one, and how many messages were published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScheduleState {
    pub next_ms: Option<u64>,
    pub last_ms: Option<u64>,
    pub runs: u64,
}

/// A schedule with its state, as stored and as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub name: String,
    pub spec: ScheduleSpec,
    pub state: ScheduleState,
}

/// Why a recurrence cannot be built, naming the spec's field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecurrenceError {
    /// `cron`, `every`, `time_zone`, or `cron, every` when neither or both are set.
    pub field: &'static str,
    pub reason: String,
}

impl RecurrenceError {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// The names of a cron expression's fields, by how many it has.
const FIVE_FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];
const SIX_FIELDS: [(&str, u32, u32); 6] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];

/// When a schedule runs: its nominal times, within its start and end.
#[derive(Debug, Clone)]
pub struct Recurrence {
    rule: Rule,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron {
        cron: Box<Cron>,
        zone: Tz,
    },
    /// Multiples of `every` after `start` (the Unix epoch without one).
    Every {
        every_ms: u64,
    },
}

/// The runs one pass publishes, and what it leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRuns {
    /// Nominal times to publish, oldest first.
    pub publish: Vec<u64>,
    /// How many of `publish` are catch-up runs: missed while no replica ran.
    pub catch_up: u64,
    /// Due runs not published: more were missed than `catch_up` allows.
    pub skipped: u64,
    /// The next nominal time after `now`, if any.
    pub next_ms: Option<u64>,
}

/// Past this many due runs in one pass, counting them one by one stops and
/// only the latest are looked for (a per-second schedule left alone for a day).
const MAX_COUNTED: usize = 100_000;
const DAY_MS: u64 = 86_400_000;
/// A run at most this late is on time, not missed: every replica wakes at
/// the next run, and one that wakes a little late still publishes it.
pub const ON_TIME_MS: u64 = 1000;

impl Recurrence {
    /// A recurrence from a spec's `cron` or `every` (exactly one), time zone
    /// and bounds.
    pub fn new(spec: &ScheduleSpec) -> Result<Self, RecurrenceError> {
        let rule = match (spec.cron.trim().is_empty(), spec.every) {
            (true, None) | (false, Some(_)) => {
                return Err(RecurrenceError::new(
                    "cron, every",
                    "exactly one must be set",
                ));
            }
            (true, Some(every)) => {
                if every < Duration::from_secs(1) {
                    return Err(RecurrenceError::new("every", "must be at least 1s"));
                }
                if !spec.time_zone.is_empty() {
                    zone(&spec.time_zone)?;
                }
                Rule::Every {
                    every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
                }
            }
            (false, None) => Rule::Cron {
                cron: Box::new(parse_cron(&spec.cron)?),
                zone: zone(&spec.time_zone)?,
            },
        };
        Ok(Self {
            rule,
            start_ms: spec.start_ms,
            end_ms: spec.end_ms,
        })
    }

    /// The first nominal time at or after `from_ms`, within the bounds.
    pub fn first_from(&self, from_ms: u64) -> Option<u64> {
        match from_ms.checked_sub(1) {
            Some(after) => self.next_after(after),
            None if self.start_ms.unwrap_or(0) > 0 => self.next_after(0),
            None => self.first_at_zero(),
        }
    }

    /// The first nominal time strictly after `after_ms`, within the bounds.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let after = match self.start_ms {
            // The start itself may be a nominal time: look from just before it.
            Some(start) if start > after_ms => start.checked_sub(1),
            _ => Some(after_ms),
        };
        let next = match after {
            Some(after) => self.next_after_raw(after)?,
            None => self.first_at_zero()?,
        };
        match self.end_ms {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }

    /// At time 0 exactly (a start of 0): a nominal time there counts.
    fn first_at_zero(&self) -> Option<u64> {
        match &self.rule {
            Rule::Every { .. } => Some(0),
            Rule::Cron { .. } => self.next_after_raw(0),
        }
    }

    fn next_after_raw(&self, after_ms: u64) -> Option<u64> {
        match &self.rule {
            Rule::Every { every_ms } => {
                let origin = self.start_ms.unwrap_or(0);
                let since = after_ms.checked_sub(origin).map_or(0, |d| d / every_ms + 1);
                origin.checked_add(since.checked_mul(*every_ms)?)
            }
            Rule::Cron { cron, zone } => cron_next_after(cron, zone, after_ms),
        }
    }

    /// The runs due at `now_ms` for a schedule whose next nominal time is
    /// `next_ms`. Runs less than [`ON_TIME_MS`] late are on time: all are
    /// published (a replica that woke a little late skips nothing). Older
    /// ones were missed while no replica ran: the latest `catch_up` of them
    /// (0 means 1) are published, the others skipped.
    pub fn due_runs(&self, next_ms: u64, now_ms: u64, catch_up: u32) -> DueRuns {
        let keep = catch_up.clamp(1, MAX_CATCH_UP) as usize;
        let on_time_from = now_ms.saturating_sub(ON_TIME_MS);
        let mut missed = VecDeque::with_capacity(keep);
        let mut missed_count = 0u64;
        let mut on_time = Vec::new();
        let mut at = Some(next_ms).filter(|&t| t <= now_ms);
        let mut counted = 0usize;
        while let Some(t) = at {
            if t >= on_time_from {
                on_time.push(t);
            } else if counted == MAX_COUNTED {
                // Too many to count: only the latest matter. Skip to a day
                // before now and count from there (at most 86,400 runs a
                // day: `every` and cron are at least a second apart).
                let from = now_ms.saturating_sub(DAY_MS).max(t);
                missed_count += self.count_between(t, from);
                missed.clear();
                counted = 0;
                at = self.first_from(from).filter(|&r| r <= now_ms);
                continue;
            } else {
                if missed.len() == keep {
                    missed.pop_front();
                }
                missed.push_back(t);
                missed_count += 1;
                counted += 1;
            }
            at = self.next_after(t).filter(|&n| n <= now_ms);
        }
        let catch_up = missed.len() as u64;
        let publish: Vec<u64> = missed.into_iter().chain(on_time).collect();
        DueRuns {
            skipped: missed_count.saturating_sub(catch_up),
            catch_up,
            next_ms: self.next_after(now_ms),
            publish,
        }
    }

    /// Roughly how many nominal times lie in `[from, to)`, for the count of
    /// skipped runs only: exact for `every`, a lower bound for cron.
    fn count_between(&self, from: u64, to: u64) -> u64 {
        match &self.rule {
            Rule::Every { every_ms } => to.saturating_sub(from) / every_ms,
            Rule::Cron { .. } => MAX_COUNTED as u64,
        }
    }
}

fn zone(name: &str) -> Result<Tz, RecurrenceError> {
    if name.is_empty() {
        return Ok(Tz::UTC);
    }
    name.parse::<Tz>()
        .map_err(|_| RecurrenceError::new("time_zone", format!("unknown time zone {name:?}")))
}

/// A cron expression of 5 fields, or 6 with seconds first; field values
/// checked here so that the message names the field as the user counts it.
fn parse_cron(expression: &str) -> Result<Cron, RecurrenceError> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if !expression.trim_start().starts_with('@') {
        let names: &[(&str, u32, u32)] = match fields.len() {
            5 => &FIVE_FIELDS,
            6 => &SIX_FIELDS,
            n => {
                return Err(RecurrenceError::new(
                    "cron",
                    format!("has {n} fields; 5, or 6 with seconds first"),
                ));
            }
        };
        for (n, (field, &(name, min, max))) in fields.iter().zip(names).enumerate() {
            check_field_values(field, min, max).map_err(|value| {
                RecurrenceError::new(
                    "cron",
                    format!(
                        "field {} ({name}): {value} is out of range {min}-{max}",
                        n + 1
                    ),
                )
            })?;
        }
    }
    let seconds = if fields.len() == 6 {
        Seconds::Required
    } else {
        Seconds::Disallowed
    };
    CronParser::builder()
        .seconds(seconds)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
        .map_err(|err| RecurrenceError::new("cron", err.to_string()))
}

/// The first number of `field` outside `min..=max`, if any. Steps (after
/// `/`) and names (`MON`, `JAN`, `L`…) are left to the parser.
fn check_field_values(field: &str, min: u32, max: u32) -> Result<(), u64> {
    for part in field.split(',') {
        let range = part.split('/').next().unwrap_or_default();
        for bound in range.split('-') {
            let digits = bound.trim_end_matches(['L', 'W', 'l', 'w']);
            let digits = digits.split('#').next().unwrap_or_default();
            if let Ok(value) = digits.parse::<u64>()
                && (value < u64::from(min) || value > u64::from(max))
            {
                return Err(value);
            }
        }
    }
    Ok(())
}

/// The local wall-clock time of an instant in `zone`.
fn local_of(zone: &Tz, ms: u64) -> Option<NaiveDateTime> {
    let utc = DateTime::<Utc>::from_timestamp_millis(i64::try_from(ms).ok()?)?;
    Some(utc.with_timezone(zone).naive_local())
}

/// The instant a local time stands for: its first occurrence when the
/// clocks go back, none when they jump over it.
fn instant_of(zone: &Tz, local: &NaiveDateTime) -> Option<u64> {
    let at = match zone.from_local_datetime(local) {
        LocalResult::Single(at) => at,
        LocalResult::Ambiguous(first, _) => first,
        LocalResult::None => return None,
    };
    u64::try_from(at.timestamp_millis()).ok()
}

/// Most local times looked at for one next run: a per-second expression
/// within a repeated hour needs 3,600; a gap is skipped in one step.
const MAX_CANDIDATES: usize = 10_000;

/// The first matching local time, as an instant, strictly after `after_ms`.
/// Local times map to instants in order (a repeated time maps to its first
/// occurrence), so the answer is the first match after the local time of
/// `after_ms` whose instant is later than `after_ms`: in a repeated hour's
/// second pass, the matches of the first pass come up again and are passed over.
fn cron_next_after(cron: &Cron, zone: &Tz, after_ms: u64) -> Option<u64> {
    let mut local = local_of(zone, after_ms)?;
    for _ in 0..MAX_CANDIDATES {
        local = cron.find_next_occurrence(&local, false).ok()?;
        if let Some(at) = instant_of(zone, &local)
            && at > after_ms
        {
            return Some(at);
        }
    }
    None
}

/// A nominal time as `redq-scheduled-time` carries it: RFC 3339, UTC, `Z`.
pub fn rfc3339_utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cron: &str, every: Option<Duration>, zone: &str) -> ScheduleSpec {
        ScheduleSpec {
            cron: cron.into(),
            every,
            time_zone: zone.into(),
            message: ScheduleMessage::default(),
            start_ms: None,
            end_ms: None,
            paused: false,
            catch_up: 1,
        }
    }

    fn ms(rfc3339: &str) -> u64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis() as u64
    }

    fn runs(r: &Recurrence, from: &str, to: &str) -> Vec<String> {
        let (mut at, end) = (ms(from), ms(to));
        let mut out = Vec::new();
        while let Some(next) = r.next_after(at).filter(|&n| n <= end) {
            out.push(rfc3339_utc(next));
            at = next;
        }
        out
    }

    #[test]
    fn a_local_time_skipped_by_spring_forward_is_not_run() {
        // Paris, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
        let r = Recurrence::new(&spec("30 2 * * *", None, "Europe/Paris")).unwrap();
        assert_eq!(
            runs(&r, "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z"),
            [
                "2026-03-28T01:30:00Z",
                "2026-03-30T00:30:00Z",
                "2026-03-31T00:30:00Z"
            ]
        );
        // Hourly: the 02:xx hour is absent that night, the others are there.
        let hourly = Recurrence::new(&spec("0 * * * *", None, "Europe/Paris")).unwrap();
        assert_eq!(
            runs(&hourly, "2026-03-28T23:30:00Z", "2026-03-29T02:30:00Z"),
            [
                "2026-03-29T00:00:00Z", // 01:00 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST
                "2026-03-29T02:00:00Z", // 04:00 CEST
            ]
        );
    }

    #[test]
    fn a_local_time_repeated_by_fall_back_runs_once() {
        // Paris, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let r = Recurrence::new(&spec("30 2 * * *", None, "Europe/Paris")).unwrap();
        assert_eq!(
            runs(&r, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        // Every 15 minutes with seconds: the repeated hour runs on its first
        // pass only, and the second pass publishes nothing.
        let quarter = Recurrence::new(&spec("0 */15 * * * *", None, "Europe/Paris")).unwrap();
        assert_eq!(
            runs(&quarter, "2026-10-24T23:50:00Z", "2026-10-25T02:10:00Z"),
            [
                "2026-10-25T00:00:00Z", // 02:00 CEST
                "2026-10-25T00:15:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T00:45:00Z", // 02:45 CEST; 02:00-02:59 CET is skipped
                "2026-10-25T02:00:00Z", // 03:00 CET
            ]
        );
        // Asked from within the second pass, the next run is after it.
        assert_eq!(
            quarter.next_after(ms("2026-10-25T01:20:00Z")),
            Some(ms("2026-10-25T02:00:00Z"))
        );
    }

    #[test]
    fn every_counts_from_start_or_the_epoch_within_the_bounds() {
        let mut s = spec("", Some(Duration::from_secs(10)), "");
        let r = Recurrence::new(&s).unwrap();
        assert_eq!(r.next_after(12_345), Some(20_000));
        assert_eq!(r.next_after(20_000), Some(30_000));
        assert_eq!(r.first_from(20_000), Some(20_000));
        s.start_ms = Some(5_000);
        s.end_ms = Some(25_000);
        let r = Recurrence::new(&s).unwrap();
        assert_eq!(r.next_after(0), Some(5_000));
        assert_eq!(r.first_from(5_000), Some(5_000));
        assert_eq!(r.next_after(5_000), Some(15_000));
        assert_eq!(r.next_after(15_000), Some(25_000));
        assert_eq!(r.next_after(25_000), None);
    }

    #[test]
    fn catch_up_publishes_the_latest_missed_runs() {
        let r = Recurrence::new(&spec("", Some(Duration::from_secs(1)), "")).unwrap();
        // 15 s is on time at 15.5 s; 10 s to 14 s were missed: the latest two go.
        let due = r.due_runs(10_000, 15_500, 2);
        assert_eq!(due.publish, [13_000, 14_000, 15_000]);
        assert_eq!((due.catch_up, due.skipped), (2, 3));
        assert_eq!(due.next_ms, Some(16_000));
        let due = r.due_runs(10_000, 15_500, 0);
        assert_eq!(due.publish, [14_000, 15_000]);
        assert_eq!((due.catch_up, due.skipped), (1, 4));
        // A replica waking less than a second late publishes every run due.
        let due = r.due_runs(14_000, 15_000, 1);
        assert_eq!(due.publish, [14_000, 15_000]);
        assert_eq!((due.catch_up, due.skipped), (0, 0));
        let due = r.due_runs(16_000, 15_500, 1);
        assert!(due.publish.is_empty());
        assert_eq!(due.next_ms, Some(16_000));
        // A day and more of per-second runs: still the latest, and counted.
        let now = 3 * DAY_MS;
        let due = r.due_runs(0, now, 3);
        assert_eq!(
            due.publish,
            [now - 4000, now - 3000, now - 2000, now - 1000, now]
        );
        assert_eq!(due.catch_up, 3);
        assert_eq!(due.skipped, now / 1000 + 1 - 5);
    }

    #[test]
    fn bad_specs_name_their_field() {
        let err = |s: ScheduleSpec| Recurrence::new(&s).unwrap_err();
        assert_eq!(
            err(spec("61 * * * *", None, "")).reason,
            "field 1 (minute): 61 is out of range 0-59"
        );
        assert_eq!(
            err(spec("0 0 25 * * *", None, "")).reason,
            "field 3 (hour): 25 is out of range 0-23"
        );
        let zone = err(spec("* * * * *", None, "Mars/Base"));
        assert_eq!(
            (zone.field, zone.reason.as_str()),
            ("time_zone", "unknown time zone \"Mars/Base\"")
        );
        assert_eq!(err(spec("", None, "")).field, "cron, every");
        assert_eq!(
            err(spec("", Some(Duration::from_millis(500)), "")).reason,
            "must be at least 1s"
        );
        assert!(err(spec("* * *", None, "")).reason.contains("3 fields"));
        assert_eq!(err(spec("x * * * *", None, "")).field, "cron");
    }

    #[test]
    fn an_expression_that_never_matches_has_no_next_run() {
        // February 31st; and 02:30 on the last Sunday of March in Paris,
        // which the clocks always skip.
        for (expression, zone) in [("0 0 31 2 *", ""), ("30 2 * 3 0L", "Europe/Paris")] {
            let r = Recurrence::new(&spec(expression, None, zone)).unwrap();
            let started = std::time::Instant::now();
            // chrono-tz's table of transitions ends before 2100.
            let next = r.next_after(ms("2026-01-01T00:00:00Z"));
            assert!(
                next.is_none_or(|t| t >= ms("2100-01-01T00:00:00Z")),
                "{expression}: {next:?}"
            );
            println!(
                "{expression} {zone}: {next:?}, found in {:?}",
                started.elapsed()
            );
        }
    }

    #[test]
    fn scheduled_times_are_rfc3339_in_utc() {
        assert_eq!(
            rfc3339_utc(ms("2026-03-29T01:00:00Z")),
            "2026-03-29T01:00:00Z"
        );
        assert_eq!(rfc3339_utc(1_500), "1970-01-01T00:00:01.500Z");
    }
}
