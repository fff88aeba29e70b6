//! `redq token create`: a new random token and its entry for the tokens file.

use crate::auth::tokens::{self, Action};
use crate::config::TokenCreateArgs;
use crate::error::BoxError;
use crate::model::Pattern;

/// Prints the token (this is the only time it is shown) and the JSON entry,
/// which holds only its SHA-256, to add to `--auth-tokens-file`.
pub fn create_token(args: TokenCreateArgs) -> Result<(), BoxError> {
    if args.name.is_empty() {
        return Err("--name: must not be empty".into());
    }
    let grants = args
        .grants
        .iter()
        .map(|grant| parse_grant(grant).map_err(|e| format!("--grant {grant:?}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let (token, sha256) = tokens::new_token();
    let entry = serde_json::json!({
        "name": args.name,
        "sha256": sha256,
        "grants": grants,
    });
    println!("token: {token}");
    println!("entry: {entry}");
    Ok(())
}

/// `ACTION:TOPIC[:SUBSCRIPTION]` as a grant of the tokens file.
fn parse_grant(text: &str) -> Result<serde_json::Value, String> {
    let mut parts = text.splitn(3, ':');
    let action = parts.next().unwrap_or_default();
    Action::parse(action).ok_or_else(|| {
        format!("{action:?} is not an action (publish, subscribe, view, browse, manage, admin)")
    })?;
    let topic = parts.next().ok_or("expected ACTION:TOPIC[:SUBSCRIPTION]")?;
    Pattern::parse(topic)?;
    let mut grant = serde_json::json!({"topics": [topic], "actions": [action]});
    if let Some(subscription) = parts.next() {
        Pattern::parse(subscription)?;
        grant["subscriptions"] = serde_json::json!([subscription]);
    }
    Ok(grant)
}
