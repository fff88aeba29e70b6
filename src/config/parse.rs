//! Parsers of flag values that clap has no parser for, each with the
//! one-line reason a bad value stops the process with.

use std::time::Duration;

pub(super) fn parse_promote_ahead(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration > Duration::from_secs(60) {
        return Err("must be at most 60s".into());
    }
    Ok(duration)
}

pub(super) fn parse_ack_ride_wait(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration > Duration::from_millis(100) {
        return Err("must be at most 100ms".into());
    }
    Ok(duration)
}

pub(super) fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err("must be a number in (0, 1]".into()),
    }
}

pub(super) fn parse_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000_000).contains(&n) => Ok(n),
        _ => Err("must be a number from 1 to 10000000".into()),
    }
}

pub(super) fn parse_attribute(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err("expected KEY=VALUE".into()),
    }
}

pub(super) fn parse_timestamp(s: &str) -> Result<prost_types::Timestamp, String> {
    s.parse()
        .map_err(|_| "expected an RFC 3339 time such as 2027-01-01T09:00:00Z".into())
}

pub(super) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(duration)
}
