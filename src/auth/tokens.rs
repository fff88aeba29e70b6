//! The tokens file (`--auth-tokens-file`): who may do what, read into a
//! table that answers "who is this token" and "may they do this".

use crate::model::Pattern;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// What a call does, as grants name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Publish, PublishStream, ScheduleDelayed, CancelScheduled, RescheduleDelayed.
    Publish,
    /// Subscribe (creating the subscription on first use), StreamingSubscribe,
    /// Ack, Nack, ModifyAckDeadline.
    Subscribe,
    /// Get and List topics and subscriptions, with their figures.
    View,
    /// ListDeadLetters, which shows payloads.
    Browse,
    /// Create, update and delete topics and subscriptions; redrive, purge, seek.
    Manage,
    /// Everything.
    Admin,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Subscribe => "subscribe",
            Action::View => "view",
            Action::Browse => "browse",
            Action::Manage => "manage",
            Action::Admin => "admin",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
    }
}

/// What a call acts on: a topic, or one of its subscriptions.
#[derive(Debug, Clone, Copy)]
pub struct Resource<'a> {
    pub topic: &'a str,
    pub subscription: Option<&'a str>,
}

impl<'a> Resource<'a> {
    pub fn topic(topic: &'a str) -> Self {
        Self {
            topic,
            subscription: None,
        }
    }

    pub fn subscription(topic: &'a str, subscription: &'a str) -> Self {
        Self {
            topic,
            subscription: Some(subscription),
        }
    }
}

impl std::fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.subscription {
            Some(subscription) => write!(
                f,
                "subscription {:?} of topic {:?}",
                subscription, self.topic
            ),
            None => write!(f, "topic {:?}", self.topic),
        }
    }
}

/// A name of the tokens file, with its grants.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    grants: Vec<Grant>,
}

#[derive(Debug)]
struct Grant {
    topics: Vec<Pattern>,
    /// None: every subscription of the topics, and the topics themselves.
    subscriptions: Option<Vec<Pattern>>,
    actions: HashSet<Action>,
}

impl Principal {
    /// Whether a grant allows `action` on `resource`. A grant restricted to
    /// some subscriptions covers those subscriptions only, not their topic.
    /// Nothing is allowed that no grant names (deny by default).
    pub fn allows(&self, action: Action, resource: Resource<'_>) -> bool {
        self.grants.iter().any(|grant| {
            (grant.actions.contains(&action) || grant.actions.contains(&Action::Admin))
                && grant.topics.iter().any(|p| p.matches(resource.topic))
                && match (&grant.subscriptions, resource.subscription) {
                    (None, _) => true,
                    (Some(patterns), Some(subscription)) => {
                        patterns.iter().any(|p| p.matches(subscription))
                    }
                    (Some(_), None) => false,
                }
        })
    }
}

/// The SHA-256 of a token, as the tokens file names it.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The tokens file as read: each token by the SHA-256 of its value, and the
/// client certificates named instead of a token.
#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: Vec<([u8; 32], Arc<Principal>)>,
    by_certificate: Vec<(String, Arc<Principal>)>,
}

impl TokenTable {
    /// Parses the file's JSON; the error names the entry and field at fault
    /// (never a hash or a token).
    pub fn parse(json: &[u8]) -> Result<Self, String> {
        let file: TokensFile = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        let mut table = TokenTable::default();
        let mut names = HashSet::new();
        for (index, entry) in file.tokens.into_iter().enumerate() {
            let at = |what: &str| format!("tokens[{index}] ({:?}): {what}", entry.name);
            if entry.name.is_empty() {
                return Err(format!("tokens[{index}]: name is empty"));
            }
            if !names.insert(entry.name.clone()) {
                return Err(at("the name is used twice"));
            }
            let mut grants = Vec::with_capacity(entry.grants.len());
            for (g, grant) in entry.grants.iter().enumerate() {
                let patterns = |list: &[String], field: &str| -> Result<Vec<Pattern>, String> {
                    if list.is_empty() {
                        return Err(at(&format!("grants[{g}].{field} is empty")));
                    }
                    list.iter()
                        .map(|p| {
                            Pattern::parse(p).map_err(|e| at(&format!("grants[{g}].{field}: {e}")))
                        })
                        .collect()
                };
                if grant.actions.is_empty() {
                    return Err(at(&format!("grants[{g}].actions is empty")));
                }
                grants.push(Grant {
                    topics: patterns(&grant.topics, "topics")?,
                    subscriptions: grant
                        .subscriptions
                        .as_deref()
                        .map(|s| patterns(s, "subscriptions"))
                        .transpose()?,
                    actions: grant.actions.iter().copied().collect(),
                });
            }
            let principal = Arc::new(Principal {
                name: entry.name.clone(),
                grants,
            });
            match (&entry.sha256, &entry.client_cert) {
                (Some(hash), None) => {
                    let bytes = hex::decode(hash)
                        .ok()
                        .and_then(|b| <[u8; 32]>::try_from(b).ok())
                        .ok_or_else(|| at("sha256 is not 64 hex digits"))?;
                    table.by_hash.push((bytes, principal));
                }
                (None, Some(subject)) if !subject.is_empty() => {
                    table.by_certificate.push((subject.clone(), principal));
                }
                _ => return Err(at("give either sha256 or client_cert")),
            }
        }
        Ok(table)
    }

    /// Who holds `token`. Every entry is compared, in constant time, so that
    /// the time taken says nothing about how close a guess was.
    pub fn by_token(&self, token: &str) -> Option<Arc<Principal>> {
        self.by_hash(&token_hash(token))
    }

    /// Who holds the token whose SHA-256 is `hash`, compared as in [`Self::by_token`].
    pub fn by_hash(&self, hash: &[u8; 32]) -> Option<Arc<Principal>> {
        let mut found = None;
        for (known, principal) in &self.by_hash {
            if bool::from(known.ct_eq(hash)) {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// Who a client certificate is, by any of its names (`CN=…`, `DNS:…`, `URI:…`).
    pub fn by_certificate(&self, names: &[String]) -> Option<Arc<Principal>> {
        self.by_certificate
            .iter()
            .find(|(subject, _)| names.iter().any(|n| n == subject))
            .map(|(_, principal)| principal.clone())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    client_cert: Option<String>,
    grants: Vec<GrantEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantEntry {
    topics: Vec<String>,
    #[serde(default)]
    subscriptions: Option<Vec<String>>,
    actions: Vec<Action>,
}

/// A new random token (`redq_` and 256 random bits in hex) and the hex
/// SHA-256 that the tokens file holds for it.
pub fn new_token() -> (String, String) {
    let bytes: [u8; 32] = rand::random();
    let token = format!("redq_{}", hex::encode(bytes));
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    (token, hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(grants: serde_json::Value) -> TokenTable {
        let file = serde_json::json!({"tokens": [{"name": "t", "sha256": hex::encode(Sha256::digest(b"tok")), "grants": grants}]});
        TokenTable::parse(file.to_string().as_bytes()).unwrap()
    }

    const ACTIONS: [Action; 6] = [
        Action::Publish,
        Action::Subscribe,
        Action::View,
        Action::Browse,
        Action::Manage,
        Action::Admin,
    ];

    #[test]
    fn a_token_is_found_by_its_value_only() {
        let table = table(serde_json::json!([]));
        assert_eq!(table.by_token("tok").unwrap().name, "t");
        assert!(table.by_token("tok ").is_none());
        assert!(table.by_token("").is_none());
    }

    #[test]
    fn malformed_files_name_the_entry_and_field() {
        let bad = [
            (
                r#"{"tokens": [{"name": "a", "grants": []}]}"#,
                "either sha256 or client_cert",
            ),
            (
                r#"{"tokens": [{"name": "a", "sha256": "abc", "grants": []}]}"#,
                "64 hex digits",
            ),
            (
                r#"{"tokens": [{"name": "a", "client_cert": "CN=a", "grants": [{"topics": [], "actions": ["view"]}]}]}"#,
                "grants[0].topics is empty",
            ),
            (
                r#"{"tokens": [{"name": "a", "client_cert": "CN=a", "grants": [{"topics": ["a..b"], "actions": ["view"]}]}]}"#,
                "empty segment",
            ),
            (
                r#"{"tokens": [{"name": "a", "client_cert": "CN=a", "grants": [{"topics": ["a"], "actions": ["fly"]}]}]}"#,
                "unknown variant",
            ),
            (
                r#"{"tokens": [{"name": "a", "client_cert": "CN=a", "grants": []}, {"name": "a", "client_cert": "CN=b", "grants": []}]}"#,
                "used twice",
            ),
            (r#"{"tokens": [], "extra": 1}"#, "unknown field"),
        ];
        for (json, why) in bad {
            let err = TokenTable::parse(json.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{json}: {err}");
        }
    }

    #[test]
    fn subscription_grants_cover_their_subscriptions_not_the_topic() {
        let table = table(
            serde_json::json!([{"topics": ["orders"], "subscriptions": ["billing"], "actions": ["subscribe", "view"]}]),
        );
        let p = table.by_token("tok").unwrap();
        assert!(p.allows(
            Action::Subscribe,
            Resource::subscription("orders", "billing")
        ));
        assert!(!p.allows(
            Action::Subscribe,
            Resource::subscription("orders", "billing2")
        ));
        assert!(!p.allows(Action::View, Resource::topic("orders")));
        assert!(!p.allows(Action::Publish, Resource::topic("orders")));
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec("[a-z0-9]{1,5}", 1..4).prop_map(|s| s.join("."))
    }

    proptest! {
        #[test]
        fn nothing_is_allowed_without_a_grant(topic in name(), sub in name(), a in 0usize..6) {
            let table = table(serde_json::json!([]));
            let p = table.by_token("tok").unwrap();
            prop_assert!(!p.allows(ACTIONS[a], Resource::topic(&topic)));
            prop_assert!(!p.allows(ACTIONS[a], Resource::subscription(&topic, &sub)));
        }

        #[test]
        fn a_grant_allows_its_actions_only_and_no_topic_sharing_a_prefix(
            topic in name(), suffix in "[a-z0-9]{1,3}", granted in 0usize..5, asked in 0usize..6,
        ) {
            let action = ACTIONS[granted];
            let table = table(serde_json::json!([{"topics": [topic.clone(), format!("{topic}.>")], "actions": [action.name()]}]));
            let p = table.by_token("tok").unwrap();
            let wanted = ACTIONS[asked];
            prop_assert_eq!(p.allows(wanted, Resource::topic(&topic)), wanted == action);
            let below = format!("{topic}.x");
            prop_assert_eq!(p.allows(wanted, Resource::topic(&below)), wanted == action);
            let sibling = format!("{topic}{suffix}");
            prop_assert!(!p.allows(wanted, Resource::topic(&sibling)));
            let sibling_below = format!("{topic}{suffix}.x");
            prop_assert!(!p.allows(wanted, Resource::topic(&sibling_below)));
        }

        #[test]
        fn admin_allows_every_action_on_its_topics_only(topic in name(), other in name(), a in 0usize..6) {
            let table = table(serde_json::json!([{"topics": [topic.clone()], "actions": ["admin"]}]));
            let p = table.by_token("tok").unwrap();
            prop_assert!(p.allows(ACTIONS[a], Resource::topic(&topic)));
            prop_assert!(p.allows(ACTIONS[a], Resource::subscription(&topic, "s")));
            prop_assert_eq!(p.allows(ACTIONS[a], Resource::topic(&other)), other == topic);
        }
    }
}
