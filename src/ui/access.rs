//! Who is calling the dashboard and what they may do: a bearer token or a
//! session cookie, the login form, logout, and the refusal of requests
//! from other origins (CSRF).

use super::Dashboard;
use super::assets;
use super::error::ApiError;
use crate::auth::{Action, Caller, Resource, token_hash};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The session cookie's name.
const SESSION_COOKIE: &str = "redq_session";

/// An authenticated caller of the dashboard.
pub struct Visitor {
    pub caller: Caller,
}

impl Visitor {
    /// The name in change logs (never the token).
    pub fn name(&self) -> &str {
        self.caller.name()
    }
}

impl FromRequestParts<Arc<Dashboard>> for Visitor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        dashboard: &Arc<Dashboard>,
    ) -> Result<Self, ApiError> {
        dashboard.visitor(&parts.headers).await
    }
}

impl Dashboard {
    /// The caller of a request: its bearer token, else its session; 401
    /// without either (on an open server everyone is let in).
    async fn visitor(&self, headers: &HeaderMap) -> Result<Visitor, ApiError> {
        if self.authorizer.is_open() {
            // Everyone: the hash is not looked at.
            if let Some(caller) = self.authorizer.identify_token_hash([0; 32]) {
                return Ok(Visitor { caller });
            }
        }
        if let Some(value) = headers.get(AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, token)| {
                    scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()
                })
                .map(|(_, token)| token.trim())
                .ok_or_else(|| {
                    ApiError::unauthenticated("the authorization header is not `Bearer <token>`")
                })?;
            return self
                .authorizer
                .identify_token_hash(token_hash(token))
                .map(|caller| Visitor { caller })
                .ok_or_else(|| ApiError::unauthenticated("unknown token"));
        }
        let Some(session) = session_cookie(headers) else {
            return Err(ApiError::unauthenticated(
                "log in at /ui/, or send `Authorization: Bearer <token>`",
            ));
        };
        let Some(hash) = self.broker.session(session).await? else {
            return Err(ApiError::unauthenticated("the session ended; log in again"));
        };
        match self.authorizer.identify_token_hash(hash) {
            Some(caller) => Ok(Visitor { caller }),
            None => {
                // Its token left the tokens file: the session ends with it.
                self.broker.end_session(session).await?;
                Err(ApiError::unauthenticated(
                    "the session's token was revoked; log in again",
                ))
            }
        }
    }

    /// Whether `visitor` may do `action` on `resource`. Changes on an open
    /// server need `--ui-allow-changes`.
    pub fn may(&self, visitor: &Visitor, action: Action, resource: Resource<'_>) -> bool {
        if action == Action::Manage && self.read_only() {
            return false;
        }
        self.authorizer.may(&visitor.caller, action, resource)
    }

    /// 403 unless `visitor` may do `action` on `resource`, whether it exists or not.
    pub fn check(
        &self,
        visitor: &Visitor,
        action: Action,
        resource: Resource<'_>,
    ) -> Result<(), ApiError> {
        if action == Action::Manage && self.read_only() {
            return Err(ApiError::forbidden(
                "the dashboard is read-only: the server has no tokens file and no --ui-allow-changes",
            ));
        }
        self.authorizer
            .check(&visitor.caller, action, resource)
            .map_err(|status| ApiError::forbidden(status.message()))
    }

    /// An open server without `--ui-allow-changes` changes nothing.
    pub fn read_only(&self) -> bool {
        self.authorizer.is_open() && !self.settings.ui_allow_changes
    }

    /// The session cookie: HttpOnly (scripts never see it), SameSite=Strict,
    /// Secure when the port speaks TLS, limited to `/ui`.
    fn session_cookie(&self, value: &str, max_age: u64) -> String {
        let secure = if self.tls { "; Secure" } else { "" };
        format!(
            "{SESSION_COOKIE}={value}; Path=/ui; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        )
    }
}

/// `GET /ui/`: the login form when a tokens file is in force and the
/// request carries no valid session or token; else the dashboard.
pub async fn index(State(dashboard): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    match dashboard.visitor(&headers).await {
        Ok(_) => assets::index().into_response(),
        Err(_) => assets::login(StatusCode::OK, false).into_response(),
    }
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /ui/login` (form-urlencoded `token`): 303 to `/ui/` with a
/// session cookie, or 401 with the form again.
pub async fn login(
    State(dashboard): State<Arc<Dashboard>>,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, ApiError> {
    if dashboard.authorizer.is_open() {
        return Ok(see_other(None));
    }
    let token = form.map(|f| f.0.token).unwrap_or_default();
    let hash = token_hash(token.trim());
    let Some(caller) = dashboard
        .authorizer
        .identify_token_hash(hash)
        .filter(|_| !token.trim().is_empty())
    else {
        // Never the token itself: a mistyped one is often almost right.
        tracing::info!("dashboard: a login was refused");
        return Ok(assets::login(StatusCode::UNAUTHORIZED, true).into_response());
    };
    let ttl = dashboard.settings.ui_session_ttl;
    let session = dashboard.broker.open_session(hash, ttl).await?;
    tracing::info!(token = %caller.name(), "dashboard: logged in");
    Ok(see_other(Some(
        dashboard.session_cookie(&session, ttl.as_secs().max(1)),
    )))
}

/// `POST /ui/logout`: ends the session in Redis, 303 to `/ui/`.
pub async fn logout(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(session) = session_cookie(&headers) {
        dashboard.broker.end_session(session).await?;
    }
    Ok(see_other(Some(dashboard.session_cookie("", 0))))
}

fn see_other(cookie: Option<String>) -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(LOCATION, "/ui/")]).into_response();
    if let Some(cookie) = cookie.and_then(|c| c.parse().ok()) {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    response
}

/// The session id of the request's cookie.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value)
}

/// Refuses (403) a request that changes something when it comes from a
/// page of another origin: its `Origin` (`null` included) is not the
/// dashboard's own, or its `Sec-Fetch-Site` is neither `same-origin` nor
/// `none`. A request with neither header (curl, a script) is judged by its
/// token alone: a browser always sends one of them on a cross-origin POST.
pub async fn refuse_cross_origin(
    State(dashboard): State<Arc<Dashboard>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let headers = request.headers();
        let site = headers
            .get("sec-fetch-site")
            .map(|v| v.to_str().unwrap_or_default());
        if site.is_some_and(|site| site != "same-origin" && site != "none") {
            return ApiError::forbidden("cross-site request refused").into_response();
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let own = own_origin(headers, request.uri(), dashboard.tls);
            if own.is_none_or(|own| origin.as_bytes() != own.as_bytes()) {
                return ApiError::forbidden("cross-origin request refused").into_response();
            }
        }
    }
    next.run(request).await
}

/// The dashboard's origin as the browser sees it: `X-Forwarded-Proto` and
/// `X-Forwarded-Host` when a proxy in front (an ingress ending TLS) sets
/// them, else this port's scheme and the `Host` header. A page of another
/// origin cannot forge them: a browser sends custom headers cross-origin
/// only after a CORS preflight, which the dashboard never approves.
fn own_origin(headers: &HeaderMap, uri: &axum::http::Uri, tls: bool) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let scheme = header("x-forwarded-proto").unwrap_or(if tls { "https" } else { "http" });
    let host = header("x-forwarded-host")
        .or_else(|| header(HOST.as_str()))
        .or_else(|| uri.authority().map(|a| a.as_str()))?;
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_session_is_found_among_other_cookies() {
        let map = headers(&[("cookie", "a=1; redq_session=abc; b=2")]);
        assert_eq!(session_cookie(&map), Some("abc"));
        assert_eq!(
            session_cookie(&headers(&[("cookie", "redq_session=")])),
            None
        );
        assert_eq!(
            session_cookie(&headers(&[("cookie", "xredq_session=abc")])),
            None
        );
        assert_eq!(session_cookie(&HeaderMap::new()), None);
    }

    #[test]
    fn the_own_origin_follows_the_port_or_the_proxy() {
        let uri = axum::http::Uri::from_static("/ui/login");
        let direct = headers(&[("host", "127.0.0.1:9090")]);
        assert_eq!(
            own_origin(&direct, &uri, false).as_deref(),
            Some("http://127.0.0.1:9090")
        );
        assert_eq!(
            own_origin(&direct, &uri, true).as_deref(),
            Some("https://127.0.0.1:9090")
        );
        let proxied = headers(&[
            ("host", "redq:9090"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "queue.example.com, inner"),
        ]);
        assert_eq!(
            own_origin(&proxied, &uri, false).as_deref(),
            Some("https://queue.example.com")
        );
        assert_eq!(own_origin(&HeaderMap::new(), &uri, false), None);
    }
}
