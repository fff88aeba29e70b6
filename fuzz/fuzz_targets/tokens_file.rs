//! The tokens file (`--auth-tokens-file`): arbitrary bytes →
//! `TokenTable::parse`; a table that parses answers lookups and grants
//! without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use redq::auth::tokens::{Action, Resource, TokenTable};

const ACTIONS: &[Action] = &[
    Action::Publish,
    Action::Subscribe,
    Action::View,
    Action::Browse,
    Action::Manage,
    Action::Admin,
];

const TOKENS: &[&str] = &[
    "",
    "redq_0000000000000000000000000000000000000000000000000000000000000000",
    "secret",
    "\u{0}é\u{feff}",
];

const RESOURCES: &[(&str, Option<&str>)] = &[
    ("orders", None),
    ("orders", Some("billing")),
    ("orders.eu.paris", Some("a.b")),
    ("", None),
    ("", Some("")),
    ("..", Some(".")),
];

fuzz_target!(|data: &[u8]| {
    let Ok(table) = TokenTable::parse(data) else {
        return;
    };
    let mut principals = Vec::new();
    for token in TOKENS {
        principals.extend(table.by_token(token));
    }
    let names: Vec<String> = ["CN=client", "DNS:redq.local", "URI:spiffe://redq/x", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    principals.extend(table.by_certificate(&names));
    // Also the strings of the file itself, as tokens and certificate names.
    if let Ok(text) = std::str::from_utf8(data) {
        for piece in text.split('"').take(64) {
            principals.extend(table.by_token(piece));
            principals.extend(table.by_certificate(&[piece.to_owned()]));
        }
    }
    for principal in &principals {
        assert!(!principal.name.is_empty());
        for &action in ACTIONS {
            for &(topic, subscription) in RESOURCES {
                let resource = match subscription {
                    Some(subscription) => Resource::subscription(topic, subscription),
                    None => Resource::topic(topic),
                };
                let allowed = principal.allows(action, resource);
                // Admin covers every action.
                if allowed && action == Action::Admin {
                    assert!(ACTIONS.iter().all(|&a| principal.allows(a, resource)));
                }
            }
        }
    }
});
