//! The web dashboard at `/ui/` on the HTTP port: pages embedded in the
//! binary and the JSON API under `/ui/api/` that they use. It asks the
//! broker, like the gRPC admin handlers, and obeys the same tokens and
//! grants (docs/dashboard.md).
//!
//! The pages are plain HTML, one ES module and one stylesheet, with charts
//! drawn as inline SVG by the module itself: nothing to vendor, nothing to
//! build, and everything `script-src 'self'` allows.

mod access;
mod api;
mod assets;
mod error;
mod views;

use crate::auth::Authorizer;
use crate::broker::Broker;
use crate::config;
use crate::health::Health;
use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::Response;
use axum::routing::{get, post};
use std::sync::Arc;

/// Every response under `/ui/`: scripts and styles from this origin only
/// (no inline code, so an injected tag runs nothing), never framed.
const CONTENT_SECURITY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; object-src 'none'; \
     base-uri 'none'; frame-ancestors 'none'";

/// What the dashboard's handlers share.
pub struct Dashboard {
    broker: Broker,
    authorizer: Authorizer,
    health: Health,
    settings: config::Dashboard,
    /// `--memory-limit-ratio`: where publishing is refused.
    memory_limit_ratio: f64,
    /// The HTTP port speaks TLS: session cookies are `Secure`.
    tls: bool,
}

impl Dashboard {
    pub fn new(
        broker: Broker,
        authorizer: Authorizer,
        health: Health,
        settings: config::Dashboard,
        memory_limit_ratio: f64,
        tls: bool,
    ) -> Self {
        Self {
            broker,
            authorizer,
            health,
            settings,
            memory_limit_ratio,
            tls,
        }
    }

    /// `/ui/…`: the pages, login and logout, and the JSON API.
    pub fn routes(self) -> Router {
        let state = Arc::new(self);
        let subscription = "/ui/api/topics/{topic}/subscriptions/{subscription}";
        Router::new()
            .route("/ui", get(assets::to_index))
            .route("/ui/", get(access::index))
            .route("/ui/assets/{file}", get(assets::asset))
            .route("/ui/login", post(access::login))
            .route("/ui/logout", post(access::logout))
            .route("/ui/api/overview", get(api::overview))
            .route("/ui/api/topics", get(api::topics))
            .route("/ui/api/topics/{topic}", get(api::topic))
            .route("/ui/api/topics/{topic}/messages", get(api::messages))
            .route("/ui/api/topics/{topic}/scheduled", get(api::scheduled))
            .route(
                "/ui/api/topics/{topic}/scheduled/{message_id}/cancel",
                post(api::cancel_scheduled),
            )
            .route(subscription, get(api::subscription))
            .route(
                &format!("{subscription}/dead-letters"),
                get(api::dead_letters),
            )
            .route(
                &format!("{subscription}/dead-letters/redrive"),
                post(api::redrive),
            )
            .route(
                &format!("{subscription}/dead-letters/purge"),
                post(api::purge),
            )
            .route(&format!("{subscription}/seek"), post(api::seek))
            .route(&format!("{subscription}/history"), get(api::history))
            .route(
                "/ui/api/{*rest}",
                get(error::not_found).post(error::not_found),
            )
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                access::refuse_cross_origin,
            ))
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(state)
    }
}

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: with it Chromium sends `Origin: null` on the login
    // form's own POST, which the cross-origin check refuses.
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
