//! Scrapes of `/metrics`, parsed.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One sample of the text exposition: `name{labels} value`.
#[derive(Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug)]
pub struct Scrape {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// The value of the sample with exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Like `get`, but the sample must be there.
    #[track_caller]
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }

    /// Whether any sample carries `label="value"`.
    pub fn has_label(&self, label: &str, value: &str) -> bool {
        self.samples
            .iter()
            .any(|s| s.labels.get(label).is_some_and(|v| v == value))
    }
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                None => (series, ""),
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            Sample {
                name: name.to_string(),
                labels,
                value: value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            }
        })
        .collect()
}

/// `GET /metrics` over HTTP/1.0; checks the status and content type.
pub async fn scrape(addr: SocketAddr) -> Scrape {
    let response = super::http_get_response(addr, "/metrics").await;
    let response = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP head");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    Scrape {
        samples: parse(body),
        text: body.to_string(),
    }
}
