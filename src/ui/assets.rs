//! The dashboard's files, embedded at build time: nothing to install or
//! fetch at run time, and no CDN for the CSP to allow.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, LOCATION};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const FAVICON: &str = include_str!("assets/favicon.svg");

const HTML: &str = "text/html; charset=utf-8";

/// The dashboard's page; the module draws each view in it.
pub fn index() -> Response {
    ([(CONTENT_TYPE, HTML)], INDEX).into_response()
}

/// The login form, saying the token was refused when `refused`.
pub fn login(status: StatusCode, refused: bool) -> Response {
    let page = if refused {
        LOGIN.replace("<p class=\"refused\" hidden>", "<p class=\"refused\">")
    } else {
        LOGIN.to_owned()
    };
    (status, [(CONTENT_TYPE, HTML)], page).into_response()
}

/// `GET /ui`: the dashboard lives at `/ui/`, whose relative links resolve.
pub async fn to_index() -> Response {
    (StatusCode::PERMANENT_REDIRECT, [(LOCATION, "/ui/")]).into_response()
}

/// `GET /ui/assets/{file}`.
pub async fn asset(Path(file): Path<String>) -> Response {
    let (body, content_type) = match file.as_str() {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "favicon.svg" => (FAVICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "not found\n").into_response(),
    };
    ([(CONTENT_TYPE, content_type)], body).into_response()
}
