//! The dashboard's HTTP API: tokens, sessions and grants, read-only mode,
//! CSRF refusal, security headers, sessions shared by replicas and ended by
//! revocation, `--ui=false`, and docs/dashboard.md naming every endpoint.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::security::{with_token, write_tokens};
use common::*;
use redq::pb;
use serde_json::{Value, json};

const VIEWER: &str = "redq_viewer-secret-0001";
const BROWSER: &str = "redq_browser-secret-0002";
const OPS: &str = "redq_ops-secret-0003";
const LONG: Duration = Duration::from_secs(60);

fn grants(file: &Path, with_ops: bool) {
    let mut entries = vec![
        (
            "viewer",
            VIEWER,
            json!([{"topics": ["orders"], "actions": ["view"]}]),
        ),
        (
            "browser",
            BROWSER,
            json!([{"topics": ["orders"], "actions": ["view", "browse"]}]),
        ),
    ];
    if with_ops {
        entries.push(("ops", OPS, json!([{"topics": [">"], "actions": ["admin"]}])));
    }
    write_tokens(file, &entries);
}

/// An HTTP/1.0 answer.
struct Reply {
    status: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.head, self.body))
    }
}

/// `method path` with `headers` and `body`, over HTTP/1.0.
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("HTTP exchange timed out")
        .expect("HTTP exchange");
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Reply {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    http(addr, "GET", path, headers, "").await
}

async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    http(addr, "POST", path, &all, body).await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `POST /ui/login` with `token`; the session cookie (`name=value`) when it worked.
async fn login(addr: SocketAddr, token: &str) -> (Reply, Option<String>) {
    let reply = http(
        addr,
        "POST",
        "/ui/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        &format!("token={token}"),
    )
    .await;
    let cookie = reply
        .header("set-cookie")
        .map(|c| c.split(';').next().unwrap_or_default().to_owned());
    (reply, cookie)
}

/// Three dead letters on `orders`/`billing`, made with `token` (nil on an open server).
async fn dead_letters(server: &TestServer, token: Option<&str>) {
    let mut client = server.client().await;
    let mut stream = client
        .subscribe(with_token(
            Sub::deadline(LONG)
                .max_attempts(1)
                .request("orders", "billing"),
            token,
        ))
        .await
        .expect("subscribe")
        .into_inner();
    client
        .publish(with_token(
            pb::PublishRequest {
                topic: "orders".into(),
                messages: vec![
                    message("one"),
                    message("<img src=x onerror=alert(1)>"),
                    message("three"),
                ],
                dedupe_id: String::new(),
            },
            token,
        ))
        .await
        .expect("publish");
    let got = expect_messages(&mut stream, 3).await;
    client
        .nack(with_token(
            pb::NackRequest {
                topic: "orders".into(),
                subscription: "billing".into(),
                ack_ids: ack_ids_of(&got),
                ..Default::default()
            },
            token,
        ))
        .await
        .expect("nack");
}

const DEAD_LETTERS: &str = "/ui/api/topics/orders/subscriptions/billing/dead-letters";

struct Secured {
    redis: RedisServer,
    dir: tempfile::TempDir,
    tokens: PathBuf,
    server: TestServer,
}

async fn secured(extra: &[&str]) -> Secured {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    grants(&tokens, true);
    let mut args = vec!["--auth-tokens-file", tokens.to_str().unwrap()];
    args.extend(extra);
    let server = TestServer::start(&redis.url(), &args).await;
    server.wait_serving().await;
    Secured {
        redis,
        dir,
        tokens,
        server,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_the_security_headers_and_pages_are_embedded() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let addr = server.metrics_addr;
    for path in [
        "/ui/",
        "/ui/assets/app.js",
        "/ui/assets/app.css",
        "/ui/api/overview",
        "/ui/api/nothing-here",
    ] {
        let reply = get(addr, path, &[]).await;
        let csp = reply.header("content-security-policy").unwrap_or_default();
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(
            reply.header("x-content-type-options").as_deref(),
            Some("nosniff")
        );
        assert_eq!(
            reply.header("referrer-policy").as_deref(),
            Some("same-origin")
        );
    }
    let page = get(addr, "/ui/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("src=\"assets/app.js\""), "{}", page.body);
    assert!(!page.body.contains("<script>"), "no inline script");
    let script = get(addr, "/ui/assets/app.js", &[]).await;
    assert!(
        script
            .header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert_eq!(get(addr, "/ui/api/nothing-here", &[]).await.status, 404);

    let overview = get(addr, "/ui/api/overview", &[]).await.json();
    assert_eq!(
        overview["version"],
        format!("redq {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(overview["redis"]["reachable"], true);
    assert_eq!(overview["read_only"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_is_read_only_unless_changes_are_allowed() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    dead_letters(&server, None).await;
    let addr = server.metrics_addr;
    let listing = get(addr, DEAD_LETTERS, &[]).await.json();
    assert_eq!(listing["dead_letters"].as_array().unwrap().len(), 3);
    let subscription = get(addr, "/ui/api/topics/orders/subscriptions/billing", &[]).await;
    assert_eq!(subscription.json()["may"]["manage"], false);
    for path in [
        format!("{DEAD_LETTERS}/purge"),
        format!("{DEAD_LETTERS}/redrive"),
        "/ui/api/topics/orders/subscriptions/billing/seek".to_owned(),
        "/ui/api/topics/orders/scheduled/s0123456789abcdef0123/cancel".to_owned(),
    ] {
        let reply = post(addr, &path, &[], "{}").await;
        assert_eq!(reply.status, 403, "{path}: {}", reply.body);
        assert!(
            reply.json()["error"]
                .as_str()
                .unwrap()
                .contains("read-only")
        );
    }
    assert_eq!(
        get(addr, DEAD_LETTERS, &[]).await.json()["dead_letters"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    let changes = TestServer::start(&redis.url(), &["--ui-allow-changes"]).await;
    let addr = changes.metrics_addr;
    assert_eq!(
        get(addr, "/ui/api/overview", &[]).await.json()["read_only"],
        false
    );
    let purged = post(addr, &format!("{DEAD_LETTERS}/purge"), &[], "").await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert_eq!(purged.json()["purged"], 3);
    assert!(
        changes.log().contains("token=anonymous"),
        "{}",
        changes.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_wants_a_token_or_a_session_and_never_redirects() {
    let s = secured(&[]).await;
    let addr = s.server.metrics_addr;
    for headers in [
        vec![],
        vec![("Authorization", "Bearer not-a-token".to_owned())],
        vec![("Authorization", "Basic abc".to_owned())],
        vec![("Cookie", "redq_session=forged".to_owned())],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reply = get(addr, "/ui/api/topics", &headers).await;
        assert_eq!(reply.status, 401, "{headers:?}");
        assert!(reply.header("location").is_none());
        assert!(reply.json()["error"].is_string());
    }
    let form = get(addr, "/ui/", &[]).await;
    assert_eq!(form.status, 200);
    assert!(
        form.body.contains("type=\"password\" name=\"token\""),
        "{}",
        form.body
    );
    assert!(form.body.contains("action=\"/ui/login\""));

    let (refused, cookie) = login(addr, "wrong").await;
    assert_eq!(refused.status, 401);
    assert!(cookie.is_none());
    assert!(refused.body.contains("name=\"token\""));

    let (accepted, cookie) = login(addr, VIEWER).await;
    assert_eq!(accepted.status, 303, "{}", accepted.body);
    assert_eq!(accepted.header("location").as_deref(), Some("/ui/"));
    let set_cookie = accepted.header("set-cookie").unwrap();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    assert!(!set_cookie.contains("Secure"), "plain HTTP: {set_cookie}");
    let cookie = cookie.unwrap();
    let overview = get(addr, "/ui/api/overview", &[("Cookie", &cookie)]).await;
    assert_eq!(overview.json()["caller"], "viewer");
    let page = get(addr, "/ui/", &[("Cookie", &cookie)]).await;
    assert!(
        page.body.contains("assets/app.js"),
        "the dashboard, not the form"
    );
    // The token is never logged.
    assert!(!s.server.log().contains(VIEWER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_decide_what_each_token_sees_and_changes() {
    let s = secured(&[]).await;
    dead_letters(&s.server, Some(OPS)).await;
    let mut client = s.server.client().await;
    client
        .publish(with_token(
            pb::PublishRequest {
                topic: "secret".into(),
                messages: vec![message("x")],
                dedupe_id: String::new(),
            },
            Some(OPS),
        ))
        .await
        .expect("publish");
    let addr = s.server.metrics_addr;
    let viewer = bearer(VIEWER);
    let viewer = [("Authorization", viewer.as_str())];

    let topics = get(addr, "/ui/api/topics", &viewer).await.json();
    let names: Vec<&str> = topics["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders"]);
    let topic = get(addr, "/ui/api/topics/orders", &viewer).await.json();
    assert_eq!(topic["length"], 3);
    assert_eq!(topic["subscriptions"][0]["name"], "billing");
    assert_eq!(topic["subscriptions"][0]["dead_letters"], 3);
    assert_eq!(topic["may"], json!({"browse": false, "manage": false}));
    let subscription = get(addr, "/ui/api/topics/orders/subscriptions/billing", &viewer)
        .await
        .json();
    assert_eq!(subscription["dead_letters"], 3);
    assert!(subscription["oldest_unacked_age_ms"].is_null());
    // Payloads need browse.
    assert_eq!(get(addr, DEAD_LETTERS, &viewer).await.status, 403);
    assert_eq!(
        get(addr, "/ui/api/topics/orders/messages", &viewer)
            .await
            .status,
        403
    );

    // The same refusal whether the topic exists or not.
    let hidden = get(addr, "/ui/api/topics/secret", &viewer).await;
    let missing = get(addr, "/ui/api/topics/missing", &viewer).await;
    assert_eq!((hidden.status, missing.status), (403, 403));
    assert_eq!(
        hidden.body.replace("secret", "NAME"),
        missing.body.replace("missing", "NAME")
    );
    let refused = post(addr, &format!("{DEAD_LETTERS}/redrive"), &viewer, "{}").await;
    assert_eq!(refused.status, 403);

    let browser = bearer(BROWSER);
    let browser = [("Authorization", browser.as_str())];
    let listing = get(addr, DEAD_LETTERS, &browser).await.json();
    let letters = listing["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 3);
    assert_eq!(letters[1]["payload"], "<img src=x onerror=alert(1)>");
    assert_eq!(letters[1]["reason"], "nacked");
    assert_eq!(letters[1]["attempts"], 1);
    let messages = get(addr, "/ui/api/topics/orders/messages?q=three", &browser)
        .await
        .json();
    assert_eq!(messages["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        post(addr, &format!("{DEAD_LETTERS}/purge"), &browser, "{}")
            .await
            .status,
        403
    );

    let ops = bearer(OPS);
    let ops = [("Authorization", ops.as_str())];
    let first = letters[0]["id"].as_str().unwrap();
    let redriven = post(
        addr,
        &format!("{DEAD_LETTERS}/redrive"),
        &ops,
        &json!({"dead_letter_ids": [first]}).to_string(),
    )
    .await;
    assert_eq!(redriven.status, 200, "{}", redriven.body);
    assert_eq!(redriven.json()["redriven"], 1);
    let purged = post(addr, &format!("{DEAD_LETTERS}/purge"), &ops, "{}").await;
    assert_eq!(purged.json()["purged"], 2);
    let log = s.server.log();
    assert!(
        log.lines().any(|l| l.contains("action=\"redrive\"")
            && l.contains("topic=orders")
            && l.contains("subscription=billing")
            && l.contains("token=ops")),
        "{log}"
    );
    let seek = post(
        addr,
        "/ui/api/topics/orders/subscriptions/billing/seek",
        &ops,
        &json!({"time": "2020-01-01T00:00:00Z"}).to_string(),
    )
    .await;
    assert_eq!(seek.status, 200, "{}", seek.body);
    assert_eq!(
        post(
            addr,
            "/ui/api/topics/orders/subscriptions/billing/seek",
            &ops,
            "{\"time\":\"yesterday\"}"
        )
        .await
        .status,
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_other_origins_are_refused() {
    let s = secured(&[]).await;
    dead_letters(&s.server, Some(OPS)).await;
    let addr = s.server.metrics_addr;
    let (_, cookie) = login(addr, OPS).await;
    let cookie = cookie.expect("a session");
    let own = format!("http://{addr}");
    let other = format!("http://127.0.0.1:{}", addr.port() + 1);
    let purge = format!("{DEAD_LETTERS}/purge");
    for (name, value) in [
        ("Origin", other.as_str()),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "same-site"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let reply = post(addr, &purge, &[("Cookie", &cookie), (name, value)], "{}").await;
        assert_eq!(reply.status, 403, "{name}: {value}");
    }
    let refused_login = http(
        addr,
        "POST",
        "/ui/login",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", &other),
        ],
        &format!("token={OPS}"),
    )
    .await;
    assert_eq!(refused_login.status, 403);
    assert!(refused_login.header("set-cookie").is_none());
    let refused_logout = post(
        addr,
        "/ui/logout",
        &[("Cookie", &cookie), ("Origin", "null")],
        "",
    )
    .await;
    assert_eq!(refused_logout.status, 403);
    // Nothing was purged; a same-origin request, or one with neither header, is let through.
    let listing = get(addr, DEAD_LETTERS, &[("Cookie", &cookie)]).await.json();
    assert_eq!(listing["dead_letters"].as_array().unwrap().len(), 3);
    let first = listing["dead_letters"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let same = post(
        addr,
        &purge,
        &[
            ("Cookie", &cookie),
            ("Origin", &own),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &json!({"dead_letter_ids": [first]}).to_string(),
    )
    .await;
    assert_eq!(same.json()["purged"], 1);
    // Behind a proxy that ends TLS, its forwarded scheme and host are the origin.
    let proxied = post(
        addr,
        &purge,
        &[
            ("Cookie", &cookie),
            ("Origin", "https://queue.example.com"),
            ("X-Forwarded-Proto", "https"),
            ("X-Forwarded-Host", "queue.example.com"),
        ],
        "{\"dead_letter_ids\":[\"1-0\"]}",
    )
    .await;
    assert_eq!(proxied.status, 200, "{}", proxied.body);
    assert_eq!(proxied.json()["purged"], 0);
    let plain = post(addr, &purge, &[("Cookie", &cookie)], "").await;
    assert_eq!(plain.json()["purged"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_live_in_redis_for_every_replica_until_logout() {
    let s = secured(&["--ui-session-ttl", "90s"]).await;
    let other = TestServer::start(
        &s.redis.url(),
        &["--auth-tokens-file", s.tokens.to_str().unwrap()],
    )
    .await;
    let (_, cookie) = login(s.server.metrics_addr, VIEWER).await;
    let cookie = cookie.expect("a session");
    let there = get(
        other.metrics_addr,
        "/ui/api/overview",
        &[("Cookie", &cookie)],
    )
    .await;
    assert_eq!(there.status, 200, "{}", there.body);
    assert_eq!(there.json()["caller"], "viewer");

    // Redis holds the session by a hash of the cookie, expiring with --ui-session-ttl.
    let keys = s.redis.cli(&["KEYS", "redq:ui:session:*"]);
    let key = keys
        .lines()
        .next()
        .expect("a session key")
        .trim()
        .to_owned();
    assert!(!key.contains(cookie.split('=').nth(1).unwrap()));
    let ttl: u64 = s.redis.cli(&["PTTL", &key]).trim().parse().unwrap();
    assert!(ttl > 0 && ttl <= 90_000, "{ttl}");

    let out = post(other.metrics_addr, "/ui/logout", &[("Cookie", &cookie)], "").await;
    assert_eq!(out.status, 303);
    assert_eq!(out.header("location").as_deref(), Some("/ui/"));
    let gone = get(
        s.server.metrics_addr,
        "/ui/api/overview",
        &[("Cookie", &cookie)],
    )
    .await;
    assert_eq!(gone.status, 401);
    assert_eq!(s.redis.cli(&["EXISTS", &key]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_token_ends_its_sessions_at_once_on_sighup() {
    let s = secured(&["--reload-interval", "1h"]).await;
    let addr = s.server.metrics_addr;
    let (_, cookie) = login(addr, OPS).await;
    let cookie = cookie.expect("a session");
    assert_eq!(
        get(addr, "/ui/api/topics", &[("Cookie", &cookie)])
            .await
            .status,
        200
    );
    grants(&s.tokens, false);
    s.server.signal(libc::SIGHUP);
    eventually("the session ends with its token", || {
        let cookie = cookie.clone();
        async move {
            get(addr, "/ui/api/topics", &[("Cookie", &cookie)])
                .await
                .status
                == 401
        }
    })
    .await;
    let _ = &s.dir;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_false_turns_the_dashboard_off() {
    let redis = RedisServer::start();
    let off = TestServer::start(&redis.url(), &["--ui=false"]).await;
    assert_eq!(get(off.metrics_addr, "/ui/", &[]).await.status, 404);
    assert_eq!(
        get(off.metrics_addr, "/ui/api/overview", &[]).await.status,
        404
    );
    assert_eq!(http_get(off.metrics_addr, "/healthz").await, 200);
    let args: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--redis-url",
        &redis.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let by_env = TestServer::spawn(&args, &[("REDQ_UI", "false")]).await;
    assert_eq!(get(by_env.metrics_addr, "/ui/", &[]).await.status, 404);
}

/// docs/dashboard.md has one table row per endpoint: as many rows as the
/// router has API handlers, and each row's method and path served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_have_a_row_per_endpoint() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let router = std::fs::read_to_string(root.join("src/ui/mod.rs")).unwrap();
    let docs = std::fs::read_to_string(root.join("docs/dashboard.md")).unwrap();
    let handlers = router.matches("get(api::").count() + router.matches("post(api::").count();
    let rows: Vec<(String, String)> = docs
        .lines()
        .filter(|l| l.starts_with("| `GET") || l.starts_with("| `POST"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (
                cells[1].trim_matches('`').to_owned(),
                cells[2].trim_matches('`').to_owned(),
            )
        })
        .collect();
    assert_eq!(rows.len(), handlers, "rows: {rows:#?}");

    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--ui-allow-changes"]).await;
    for (method, path) in &rows {
        let path = path
            .replace("{topic}", "orders")
            .replace("{subscription}", "billing")
            .replace("{message_id}", "s0123456789abcdef0123");
        let reply = http(server.metrics_addr, method, &path, &[], "").await;
        assert!(
            reply.status != 405 && !reply.body.contains("no such endpoint"),
            "{method} {path}: {} {}",
            reply.status,
            reply.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_draws_the_same_charts_from_redis() {
    let pair = two_replicas().await;
    let mut client = pair.client_a.clone();
    let mut stream = subscribe(&mut client, "orders", "billing", Sub::deadline(LONG)).await;
    publish(&mut client, "orders", payloads("m", 4)).await;
    expect_messages(&mut stream, 4).await;
    let path = "/ui/api/topics/orders/subscriptions/billing/history";
    let (a, b) = (pair.a.metrics_addr, pair.b.metrics_addr);
    let last_point = |reply: Value| reply["points"].as_array().unwrap().last().cloned();
    eventually("a chart point after the publish", || async move {
        last_point(get(a, path, &[]).await.json()).is_some_and(|p| p["published"] == 4)
    })
    .await;
    let from_a = get(a, path, &[]).await.json();
    let point = last_point(from_a.clone()).unwrap();
    assert_eq!(point["pending"], 4);
    assert_eq!(point["lag"], 0);
    // The other replica reads the same points (unless a new one came between).
    let from_b = get(b, path, &[]).await.json();
    let again = get(a, path, &[]).await.json();
    assert!(from_b == from_a || from_b == again, "{from_a} {from_b}");
    let overview = get(b, "/ui/api/overview", &[]).await.json();
    eventually("both replicas listed", || async move {
        get(b, "/ui/api/overview", &[]).await.json()["replicas"]
            .as_array()
            .is_some_and(|r| r.len() == 2)
    })
    .await;
    assert!(overview["replicas"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redq_dev_prints_the_dashboards_address() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(redq_bin())
        .args(["dev", "--dir"])
        .arg(tmp.path().join("dev"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redq dev");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("Dashboard: ") {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let url = rx.recv_timeout(STARTUP_TIMEOUT);
    let outcome = async {
        let url = url.expect("a `Dashboard: …` line");
        let rest = url.strip_prefix("http://").expect("http://");
        let (addr, path) = rest.split_once('/').expect("a path");
        assert_eq!(path, "ui/");
        let addr: SocketAddr = addr.parse().expect("an address");
        eventually("the dashboard answers", || async move {
            get(addr, "/ui/", &[]).await.status == 200
        })
        .await;
    };
    let outcome = tokio::time::timeout(Duration::from_secs(60), outcome).await;
    // SIGINT: redq dev stops its redis-server too.
    // SAFETY: kill(2) on the child this test spawned; no memory involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    outcome.expect("redq dev's dashboard");
}

/// `request` (a whole HTTP/1.1 request) over TLS to `port`, trusting `ca_pem`.
async fn https(port: u16, ca_pem: &str, request: &str) -> String {
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS handshake");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_session_cookie_is_secure_and_the_origin_is_https() {
    let dir = tempfile::tempdir().unwrap();
    let pki = common::security::Pki::new(dir.path(), "main");
    let pair = pki.server("http");
    let s = secured(&[
        "--http-tls-cert",
        pair.cert.to_str().unwrap(),
        "--http-tls-key",
        pair.key.to_str().unwrap(),
    ])
    .await;
    let port = s.server.metrics_addr.port();
    let body = format!("token={VIEWER}");
    let login = |origin: &str| {
        format!(
            "POST /ui/login HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: {origin}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let plain_origin = https(
        port,
        &pki.ca_pem,
        &login(&format!("http://localhost:{port}")),
    )
    .await;
    assert!(plain_origin.starts_with("HTTP/1.1 403"), "{plain_origin}");
    let response = https(
        port,
        &pki.ca_pem,
        &login(&format!("https://localhost:{port}")),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 303"), "{response}");
    let cookie = response
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {response}"));
    assert!(cookie.contains("; Secure"), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_are_paged_found_and_searched_and_scheduled_ones_cancelled() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--ui-allow-changes"]).await;
    let mut client = server.client().await;
    let ids = publish(&mut client, "orders", payloads("m", 5)).await;
    let mut tagged = message("{\"total\": 12}");
    tagged.attributes.insert("region".into(), "eu".into());
    client
        .publish(pb::PublishRequest {
            topic: "orders".into(),
            messages: vec![tagged],
            dedupe_id: String::new(),
        })
        .await
        .expect("publish");
    let later = schedule(
        &mut client,
        "orders",
        message("later"),
        Due::After(Duration::from_secs(3600)),
    )
    .await
    .message_id;
    let addr = server.metrics_addr;
    let page = |path: String| async move { get(addr, &path, &[]).await.json() };
    let messages = "/ui/api/topics/orders/messages";

    let first = page(format!("{messages}?limit=4")).await;
    let shown: Vec<&str> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(shown.len(), 4, "newest first: {first}");
    assert_eq!(first["messages"][0]["payload_format"], "json");
    assert_eq!(shown[1..], [ids[4].as_str(), &ids[3], &ids[2]]);
    let before = first["next_before"].as_str().unwrap();
    let second = page(format!("{messages}?limit=4&before={before}")).await;
    assert_eq!(second["messages"].as_array().unwrap().len(), 2);
    assert!(second["next_before"].is_null());

    let found = page(format!("{messages}?id={}", ids[1])).await;
    assert_eq!(found["messages"][0]["payload"], "m-1");
    let by_attribute = page(format!("{messages}?attribute=region%3Deu")).await;
    assert_eq!(by_attribute["messages"].as_array().unwrap().len(), 1);
    let by_text = page(format!("{messages}?q=m-3")).await;
    assert_eq!(by_text["messages"][0]["message_id"], ids[3].as_str());

    let scheduled = page("/ui/api/topics/orders/scheduled".into()).await;
    assert_eq!(scheduled["scheduled"][0]["message_id"], later.as_str());
    assert_eq!(scheduled["scheduled"][0]["payload"], "later");
    assert!(scheduled["scheduled"][0]["publish_time_ms"].is_null());
    let found = page(format!("{messages}?id={later}")).await;
    assert_eq!(found["messages"][0]["payload"], "later");
    let cancel = format!("/ui/api/topics/orders/scheduled/{later}/cancel");
    assert_eq!(post(addr, &cancel, &[], "").await.json()["cancelled"], true);
    assert_eq!(
        post(addr, &cancel, &[], "").await.json()["cancelled"],
        false
    );
    let scheduled = page("/ui/api/topics/orders/scheduled".into()).await;
    assert!(scheduled["scheduled"].as_array().unwrap().is_empty());
    assert!(server.log().contains("action=\"cancel\""));
    assert_eq!(
        get(addr, &format!("{messages}?limit=0"), &[]).await.status,
        400
    );
    assert_eq!(
        get(addr, &format!("{messages}?before=x"), &[]).await.status,
        400
    );
}
