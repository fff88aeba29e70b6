//! How the client subcommands show things: payloads, attributes, times,
//! durations and aligned tables.

use crate::pb;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// A progress bar over `len` messages on stderr, drawn only when stderr is a
/// terminal; `label` goes before the bar.
pub fn progress_bar(len: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix}{bar:40.cyan/blue} {human_pos}/{human_len} messages  {elapsed}  eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if !label.is_empty() {
        bar.set_prefix(format!("{label}  "));
    }
    bar
}

/// A payload as text when it is UTF-8, else as base64; the flag says which.
pub fn payload(bytes: &[u8]) -> (String, bool) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), true),
        Err(_) => (BASE64.encode(bytes), false),
    }
}

/// A payload for a one-line-per-message display: control characters escaped
/// so a message never spans lines, `base64:` before non-UTF-8 payloads.
pub fn payload_inline(bytes: &[u8]) -> String {
    match payload(bytes) {
        (text, true) => escape_controls(&text),
        (encoded, false) => format!("base64:{encoded}"),
    }
}

/// Escapes control characters (`\n`, `\t`, …) and backslashes, leaving other
/// text, including non-ASCII letters, as is.
pub fn escape_controls(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() || c == '\\' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Attributes sorted by key, `{k=v, k2=v2}` (`{}` when none).
pub fn attributes(attributes: &HashMap<String, String>) -> String {
    let mut pairs: Vec<_> = attributes.iter().collect();
    pairs.sort();
    let inner: Vec<String> = pairs
        .into_iter()
        .map(|(k, v)| format!("{}={}", escape_controls(k), escape_controls(v)))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

/// An RFC 3339 time with milliseconds, or `-` when unset.
pub fn timestamp(ts: Option<&prost_types::Timestamp>) -> String {
    ts.map_or_else(|| "-".to_string(), rfc3339)
}

/// RFC 3339 in UTC, with the fraction of a second prost prints (ms, µs or ns).
pub fn rfc3339(ts: &prost_types::Timestamp) -> String {
    ts.to_string()
}

/// How far `ts` is from now: `in 1m 30s` or `2s ago`.
pub fn relative(ts: &prost_types::Timestamp) -> String {
    let Ok(at) = SystemTime::try_from(*ts) else {
        return String::new();
    };
    match at.duration_since(SystemTime::now()) {
        Ok(ahead) => format!("in {}", short_duration(ahead)),
        Err(past) => format!("{} ago", short_duration(past.duration())),
    }
}

/// A proto duration for people (`4s 120ms`), `-` when unset.
pub fn duration(d: Option<&prost_types::Duration>) -> String {
    match d.map(|d| Duration::try_from(*d)) {
        None => "-".to_string(),
        Some(Ok(d)) => short_duration(d),
        Some(Err(_)) => "negative".to_string(),
    }
}

/// Whole milliseconds below a minute, whole seconds above (`1m 30s`, `250ms`).
pub fn short_duration(d: Duration) -> String {
    let rounded = if d >= Duration::from_secs(60) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(rounded).to_string()
}

/// Columns padded to their widest cell, two spaces apart, the header first.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Rows below the header.
    pub fn len(&self) -> usize {
        self.rows.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table as lines, each ending in `\n`; the last column is not padded.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(i))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A message's attributes, ordering key and payload (`payload` when it is
/// UTF-8 text, else `payload_base64`) into a JSON object being built.
pub fn insert_message(
    object: &mut serde_json::Map<String, serde_json::Value>,
    message: &pb::Message,
) {
    let attributes: serde_json::Map<String, serde_json::Value> = message
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    if !message.topic.is_empty() {
        object.insert("topic".into(), message.topic.clone().into());
    }
    object.insert("attributes".into(), attributes.into());
    object.insert("ordering_key".into(), message.ordering_key.clone().into());
    match payload(&message.payload) {
        (text, true) => object.insert("payload".into(), text.into()),
        (encoded, false) => object.insert("payload_base64".into(), encoded.into()),
    };
}

/// `object` as one line of JSON lines output.
pub fn json_line(object: serde_json::Map<String, serde_json::Value>) -> String {
    let mut line = serde_json::Value::Object(object).to_string();
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_text_when_utf8_else_base64() {
        assert_eq!(payload_inline(b"hello"), "hello");
        assert_eq!(payload_inline(b"a\nb\\c"), "a\\nb\\\\c");
        assert_eq!(payload_inline(&[0xff, 0x00]), "base64:/wA=");
        assert_eq!(payload("héllo".as_bytes()), ("héllo".to_string(), true));
    }

    #[test]
    fn attributes_are_sorted() {
        let attrs = HashMap::from([
            ("b".to_string(), "2".to_string()),
            ("a".to_string(), "1".to_string()),
        ]);
        assert_eq!(attributes(&attrs), "{a=1, b=2}");
        assert_eq!(attributes(&HashMap::new()), "{}");
    }

    #[test]
    fn durations_are_rounded_for_people() {
        assert_eq!(short_duration(Duration::from_micros(4_120_700)), "4s 120ms");
        assert_eq!(short_duration(Duration::from_millis(90_250)), "1m 30s");
        assert_eq!(duration(None), "-");
    }

    #[test]
    fn tables_align_columns() {
        let mut table = Table::new(&["NAME", "N"]);
        table.row(vec!["orders".into(), "12".into()]);
        table.row(vec!["a".into(), "3".into()]);
        assert_eq!(table.render(), "NAME    N\norders  12\na       3\n");
        assert_eq!(table.len(), 2);
    }
}
