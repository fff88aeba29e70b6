//! Authentication and authorization: who a call comes from (a bearer token,
//! or a client certificate the tokens file names) and whether a grant lets
//! them do it; the per-token abuse limits.
//!
//! Handlers ask first, before validating the request or calling Redis, so
//! that a caller without the grant learns nothing, not even whether the
//! topic exists.

mod file;
pub mod tokens;

pub use file::TokensFile;

use crate::metrics::{Limit, SecurityMetrics};
use crate::tls::ConnectionInfo;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
pub use tokens::{Action, Principal, Resource, TokenTable, token_hash};
use tokio::sync::watch;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The per-token limits, from `--max-streams-per-token` and
/// `--publish-rate-per-token` (0: none).
#[derive(Debug, Clone, Copy)]
pub struct TokenLimits {
    pub max_streams: u32,
    pub publish_rate: u32,
}

/// Decides every call; cheap to clone.
#[derive(Clone)]
pub struct Authorizer {
    inner: Arc<Inner>,
}

struct Inner {
    /// None: no tokens file, every call is allowed.
    table: Option<watch::Receiver<Arc<TokenTable>>>,
    reflection_needs_token: bool,
    limits: TokenLimits,
    open_streams: Mutex<HashMap<String, u32>>,
    publish_rate: Option<DefaultKeyedRateLimiter<String>>,
    metrics: SecurityMetrics,
}

/// How a caller proved who they are.
#[derive(Clone)]
enum Credential {
    Open,
    Token(String),
    /// The SHA-256 of a token: a dashboard session keeps no token.
    TokenHash([u8; 32]),
    Certificate(Arc<Vec<String>>),
}

/// Who made a call, once authenticated.
#[derive(Clone)]
pub struct Caller {
    credential: Credential,
    principal: Option<Arc<Principal>>,
}

impl Caller {
    /// The name for logs and limits (never the token).
    pub fn name(&self) -> &str {
        self.principal
            .as_ref()
            .map_or("anonymous", |p| p.name.as_str())
    }
}

impl Authorizer {
    /// Allows every call: no tokens file.
    pub fn open(metrics: SecurityMetrics) -> Self {
        Self::new(
            None,
            false,
            TokenLimits {
                max_streams: u32::MAX,
                publish_rate: 0,
            },
            metrics,
        )
    }

    /// Decides by the table `table` holds now (it changes on reload).
    pub fn new(
        table: Option<watch::Receiver<Arc<TokenTable>>>,
        reflection_needs_token: bool,
        limits: TokenLimits,
        metrics: SecurityMetrics,
    ) -> Self {
        let publish_rate = NonZeroU32::new(limits.publish_rate)
            .filter(|_| table.is_some())
            .map(|rate| RateLimiter::keyed(Quota::per_second(rate)));
        Self {
            inner: Arc::new(Inner {
                table,
                reflection_needs_token,
                limits,
                open_streams: Mutex::default(),
                publish_rate,
                metrics,
            }),
        }
    }

    pub fn is_open(&self) -> bool {
        self.inner.table.is_none()
    }

    /// Who sent `request`: UNAUTHENTICATED without a token or certificate
    /// the tokens file knows.
    pub fn authenticate<T>(&self, request: &tonic::Request<T>) -> Result<Caller, Status> {
        let Some(table) = &self.inner.table else {
            return Ok(Caller {
                credential: Credential::Open,
                principal: None,
            });
        };
        let credential = match bearer_token(request.metadata())? {
            Some(token) => Credential::Token(token.to_owned()),
            None => match request
                .extensions()
                .get::<ConnectionInfo>()
                .and_then(|info| info.certificate_names.clone())
            {
                Some(names) => Credential::Certificate(names),
                None => {
                    self.inner.metrics.unauthenticated();
                    return Err(Status::unauthenticated(
                        "no token: send `authorization: Bearer <token>`",
                    ));
                }
            },
        };
        let principal = identify(&table.borrow(), &credential).ok_or_else(|| {
            self.inner.metrics.unauthenticated();
            Status::unauthenticated("unknown token")
        })?;
        Ok(Caller {
            credential,
            principal: Some(principal),
        })
    }

    /// Who holds the token whose SHA-256 is `hash` (the dashboard's bearer
    /// token or session), by the tokens file as it is now: None when it
    /// does not name it. Everyone, when the server is open.
    pub fn identify_token_hash(&self, hash: [u8; 32]) -> Option<Caller> {
        let Some(table) = &self.inner.table else {
            return Some(Caller {
                credential: Credential::Open,
                principal: None,
            });
        };
        let credential = Credential::TokenHash(hash);
        let Some(principal) = identify(&table.borrow(), &credential) else {
            self.inner.metrics.unauthenticated();
            return None;
        };
        Some(Caller {
            credential,
            principal: Some(principal),
        })
    }

    /// `caller` by the tokens file as it is now: a stream's later requests
    /// are decided by the current grants, not those it opened with.
    pub fn refresh(&self, caller: &Caller) -> Result<Caller, Status> {
        let Some(table) = &self.inner.table else {
            return Ok(caller.clone());
        };
        let principal = identify(&table.borrow(), &caller.credential).ok_or_else(|| {
            self.inner.metrics.unauthenticated();
            Status::unauthenticated("the token was revoked")
        })?;
        Ok(Caller {
            credential: caller.credential.clone(),
            principal: Some(principal),
        })
    }

    /// Whether `caller` may do `action` on `resource` (always, when open).
    pub fn may(&self, caller: &Caller, action: Action, resource: Resource<'_>) -> bool {
        caller
            .principal
            .as_ref()
            .is_none_or(|p| p.allows(action, resource))
    }

    /// PERMISSION_DENIED unless `caller` may do `action` on `resource`; the
    /// message names both, whether the resource exists or not.
    pub fn check(
        &self,
        caller: &Caller,
        action: Action,
        resource: Resource<'_>,
    ) -> Result<(), Status> {
        if self.may(caller, action, resource) {
            return Ok(());
        }
        self.inner.metrics.permission_denied();
        Err(Status::permission_denied(format!(
            "{:?} may not {} on {resource}",
            caller.name(),
            action.name()
        )))
    }

    /// Authenticates and checks in one step: what most handlers need.
    pub fn authorize<T>(
        &self,
        request: &tonic::Request<T>,
        action: Action,
        resource: Resource<'_>,
    ) -> Result<Caller, Status> {
        let caller = self.authenticate(request)?;
        self.check(&caller, action, resource)?;
        Ok(caller)
    }

    /// For gRPC reflection: any valid token with `--auth-reflection`.
    pub fn check_reflection(&self, request: &tonic::Request<()>) -> Result<(), Status> {
        if self.inner.reflection_needs_token {
            self.authenticate(request)?;
        }
        Ok(())
    }

    /// Takes `messages` from the caller's publish rate: RESOURCE_EXHAUSTED
    /// with a RetryInfo when it is spent.
    pub fn take_publish_rate(&self, caller: &Caller, messages: usize) -> Result<(), Status> {
        let (Some(limiter), Some(principal)) = (&self.inner.publish_rate, &caller.principal) else {
            return Ok(());
        };
        let Some(n) = NonZeroU32::new(u32::try_from(messages).unwrap_or(u32::MAX)) else {
            return Ok(());
        };
        let refused = match limiter.check_key_n(&principal.name, n) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(not_until)) => (
                format!(
                    "{:?} is over its publish rate of {} messages/s",
                    principal.name, self.inner.limits.publish_rate
                ),
                not_until.wait_time_from(DefaultClock::default().now()),
            ),
            Err(_) => (
                format!(
                    "a batch of {messages} is more than the publish rate of {} messages/s allows at once",
                    self.inner.limits.publish_rate
                ),
                std::time::Duration::from_secs(1),
            ),
        };
        self.inner.metrics.limited(Limit::PublishRate);
        let (message, retry_after) = refused;
        Err(Status::with_error_details(
            Code::ResourceExhausted,
            message,
            ErrorDetails::with_retry_info(Some(retry_after)),
        ))
    }

    /// Counts an open Subscribe stream of `caller` until the slot is dropped:
    /// RESOURCE_EXHAUSTED beyond `--max-streams-per-token`.
    pub fn open_stream(&self, caller: &Caller) -> Result<StreamSlot, Status> {
        let Some(principal) = &caller.principal else {
            return Ok(StreamSlot { owner: None });
        };
        let mut open = self.inner.open_streams.lock().expect("streams lock");
        let count = open.entry(principal.name.clone()).or_default();
        if *count >= self.inner.limits.max_streams {
            self.inner.metrics.limited(Limit::StreamsPerToken);
            return Err(Status::resource_exhausted(format!(
                "{:?} has {} Subscribe streams open on this replica, its limit",
                principal.name, count
            )));
        }
        *count += 1;
        Ok(StreamSlot {
            owner: Some((self.clone(), principal.name.clone())),
        })
    }

    /// Resolves once the tokens file no longer lets `caller` do `action` on
    /// the resource (its token was removed, or the grant): the status to end
    /// its stream with. Pending forever when the server is open.
    pub async fn revoked(
        &self,
        caller: &Caller,
        action: Action,
        topic: &str,
        subscription: &str,
    ) -> Status {
        let Some(mut table) = self.inner.table.clone() else {
            return std::future::pending().await;
        };
        let resource = Resource {
            topic,
            subscription: Some(subscription),
        };
        loop {
            if table.changed().await.is_err() {
                return std::future::pending().await;
            }
            let current = table.borrow_and_update().clone();
            let status = match identify(&current, &caller.credential) {
                None => Status::unauthenticated("the token was revoked"),
                Some(principal) if !principal.allows(action, resource) => {
                    Status::permission_denied(format!(
                        "{:?} may no longer {} on {resource}",
                        principal.name,
                        action.name()
                    ))
                }
                Some(_) => continue,
            };
            self.inner.metrics.revoked();
            tracing::info!(token = %caller.name(), %topic, %subscription, "ended a stream: its token was revoked");
            return status;
        }
    }
}

/// Holds one of a token's stream slots; dropping it frees the slot.
pub struct StreamSlot {
    owner: Option<(Authorizer, String)>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some((authorizer, name)) = &self.owner {
            let mut open = authorizer.inner.open_streams.lock().expect("streams lock");
            if let Some(count) = open.get_mut(name) {
                *count -= 1;
                if *count == 0 {
                    open.remove(name);
                }
            }
        }
    }
}

fn identify(table: &TokenTable, credential: &Credential) -> Option<Arc<Principal>> {
    match credential {
        Credential::Open => None,
        Credential::Token(token) => table.by_token(token),
        Credential::TokenHash(hash) => table.by_hash(hash),
        Credential::Certificate(names) => table.by_certificate(names),
    }
}

/// The token of `authorization: Bearer <token>`, if any.
fn bearer_token(metadata: &tonic::metadata::MetadataMap) -> Result<Option<&str>, Status> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim()))
        }
        _ => Err(Status::unauthenticated(
            "the authorization header is not `Bearer <token>`",
        )),
    }
}
