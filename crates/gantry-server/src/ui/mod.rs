//! The web dashboard (`/ui`), server-rendered: plain HTML with inline CSS and SVG, no
//! JavaScript and no build toolchain. Behind the same tokens as the API: a login form (with a
//! CSRF value) opens a session whose cookie holds a random id, never the token
//! (`session.rs`); every page carries framing and content-security headers and refreshes
//! itself. Pages: the fleet (every GPU a tile, MIG instances as
//! sub-tiles, colored by queue, filled by utilization; allocation and use over the last
//! hour), the queue (each pending job with its reason), usage (chargeback and per-queue use
//! against quota over the week), and a job (its tasks, why it waits, its log tail). The fleet
//! page and its charts are in `fleet.rs`, the other pages in `pages.rs`.

use crate::auth::Principal;
use crate::error::ControlError;
use crate::meter::UsageBy;
use crate::series::Point;
use crate::views::{self, GpuView, JobView, NodeView, QueueView};
use crate::{Shared, now_s};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use gantry_types::JobState;
use std::collections::BTreeMap;
use std::fmt::Write;

/// HTML-escape text.
use gantry_chart::escape as esc;

/// A queue's color: a fixed palette, picked by name (the same queue, the same color).
pub(super) fn queue_color(queue: &str) -> &'static str {
    const PALETTE: [&str; 10] =
        ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"];
    let hash = queue.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619));
    PALETTE[hash as usize % PALETTE.len()]
}

const STYLE: &str = r#"
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2430;background:#f4f5f7}
header{background:#1f2430;color:#fff;padding:10px 24px;display:flex;align-items:center;gap:28px}
header b{font-size:17px;letter-spacing:.5px}header a{color:#c9d1e0;text-decoration:none;padding:4px 0}header a.on{color:#fff;border-bottom:2px solid #f28e2b}
header .who{margin-left:auto;color:#8c95a8;font-size:12px}main{padding:20px 24px;max-width:1400px}
h1{font-size:20px;margin:4px 0 14px}h2{font-size:15px;margin:22px 0 8px;color:#3a4150}
.cards{display:flex;gap:14px;flex-wrap:wrap}.card{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px #0001;min-width:150px}
.card .v{font-size:24px;font-weight:600}.card .l{color:#6b7385;font-size:12px;text-transform:uppercase;letter-spacing:.4px}
.panel{background:#fff;border-radius:8px;padding:14px 16px;box-shadow:0 1px 2px #0001;margin-bottom:14px}
.nodes{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:14px}
.node h3{margin:0 0 8px;font-size:14px;display:flex;justify-content:space-between}.node h3 small{color:#6b7385;font-weight:400}
.flag{background:#e15759;color:#fff;border-radius:4px;padding:0 6px;font-size:11px;margin-left:6px}
.gpus{display:grid;grid-template-columns:repeat(4,1fr);gap:6px}
a.gpu{display:block;text-decoration:none}.gpu{position:relative;height:62px;border-radius:6px;background:#e8eaef;overflow:hidden;border:1px solid #d5d9e2}
.gpu .fill{position:absolute;left:0;right:0;bottom:0;opacity:.9}.gpu .alloc{position:absolute;inset:0;opacity:.28}
.gpu .t{position:absolute;left:5px;top:3px;font-size:11px;font-weight:600;color:#1f2430}.gpu .s{position:absolute;left:5px;bottom:3px;font-size:10px;color:#1f2430}
.gpu .m{position:absolute;right:5px;top:3px;font-size:10px;color:#4a5263}
.mig{position:absolute;left:3px;right:3px;top:18px;bottom:16px;display:flex;gap:2px}.mig div{flex:1;border-radius:3px;background:#d5d9e2}
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #eceef2;vertical-align:top}
th{font-size:12px;color:#6b7385;text-transform:uppercase;letter-spacing:.3px;background:#fafbfc}td.n{text-align:right;font-variant-numeric:tabular-nums}
.dot{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:6px;vertical-align:-1px}
.reason{color:#8a3b12}.muted{color:#6b7385}.bar{height:8px;background:#eceef2;border-radius:4px;position:relative;min-width:120px}
.bar i{position:absolute;left:0;top:0;bottom:0;border-radius:4px}td{white-space:nowrap}td.wrap,td.reason{white-space:normal}table.facts{max-width:720px}table.facts th{width:170px}
pre{white-space:pre-wrap;word-break:break-all;background:#1f2430;color:#e6e9ef;padding:12px;border-radius:6px;overflow:auto;max-height:420px;font-size:12px}
.legend span{margin-right:16px;font-size:12px;color:#4a5263}form.login{max-width:420px;margin:80px auto}input{width:100%;padding:8px;font:inherit;margin:8px 0}
button{padding:8px 16px;background:#1f2430;color:#fff;border:0;border-radius:6px;font:inherit;cursor:pointer}.err{color:#e15759}
form.out{display:inline}form.out button{padding:0;background:none;color:#c9d1e0;font-size:12px;text-decoration:underline}
th a{color:inherit;text-decoration:none}th a.on{color:#1f2430}.range a{margin-right:10px}.range a.on{font-weight:600;color:#1f2430}
.groups{display:flex;gap:10px;flex-wrap:wrap;margin-bottom:10px}.group{background:#fff5ec;border:1px solid #f3d3b5;border-radius:6px;padding:6px 10px;font-size:13px}
"#;

/// Seconds between a page's automatic reloads.
pub const REFRESH_S: u32 = 30;

pub(super) fn page(title: &str, active: &str, who: Option<&Principal>, body: &str) -> Html<String> {
    let mut nav = String::new();
    for (href, label) in [("/ui/fleet", "Fleet"), ("/ui/queue", "Queue"), ("/ui/usage", "Usage")] {
        let class = if label == active { " class=on" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{class}>{label}</a>");
    }
    // Logged-in pages reload themselves (no script: the content-security policy allows none).
    let refresh = if who.is_some() { format!("<meta http-equiv=refresh content={REFRESH_S}>") } else { String::new() };
    let who = who.map_or(String::new(), |w| {
        format!(
            "<span class=who>token {} · updated {} · <form class=out method=post action=\"/ui/logout\"><button>log out</button></form></span>",
            esc(&w.name),
            fleet::date_time(now_s())
        )
    });
    Html(format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">{refresh}<title>{} · gantry</title><style>{STYLE}</style></head><body><header><b>gantry</b>{nav}{who}</header><main>{body}</main></body></html>",
        esc(title)
    ))
}

/// The token behind the request: an `Authorization` header (scripts), or the session the
/// cookie names.
fn secret(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    if let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())
        && let Some(token) = auth.strip_prefix("Bearer ")
    {
        return Some(token.trim().to_string());
    }
    let id = session::cookie(headers, session::SESSION_COOKIE)?;
    shared.ui_sessions.secret(&id, now_s())
}

/// Who is looking (`None`: send them to the login page).
pub(super) fn viewer(shared: &Shared, headers: &HeaderMap) -> Option<Principal> {
    let who = secret(shared, headers).and_then(|s| shared.read(|c| c.authenticate(&s, crate::now_s())).ok());
    who.filter(|w| w.not_agent().is_ok())
}

pub(super) fn to_login() -> Response {
    Redirect::to("/ui/login").into_response()
}

pub(super) fn failure(e: ControlError) -> Response {
    let status = crate::api::status::status_of(&e);
    (status, page("Error", "", None, &format!("<h1>{}</h1><p class=err>{}</p>", status, esc(&e.to_string()))))
        .into_response()
}

mod fleet;
mod pages;
mod running;
pub mod session;

use fleet::fleet;
use pages::{job, queue, usage};

pub fn router() -> axum::Router<Shared> {
    axum::Router::new()
        .route("/ui", axum::routing::get(|| async { Redirect::to("/ui/fleet") }))
        .route("/ui/login", axum::routing::get(login_form).post(login))
        .route("/ui/logout", axum::routing::post(logout))
        .route("/ui/fleet", axum::routing::get(fleet))
        .route("/ui/queue", axum::routing::get(queue))
        .route("/ui/usage", axum::routing::get(usage))
        .route("/ui/jobs/{id}", axum::routing::get(job))
        .layer(axum::middleware::map_response(session::security_headers))
}

/// The login form, with a fresh CSRF value in a hidden field and in a cookie (the POST must
/// bring both, equal).
fn login_page(status: StatusCode, error: &str, next: &str) -> Response {
    let Some(csrf) = session::random_value() else {
        return failure(ControlError::Internal("cannot read /dev/urandom for the login form".into()));
    };
    let error = if error.is_empty() { String::new() } else { format!("<p class=err>{}</p>", esc(error)) };
    let html = page(
        "Log in",
        "",
        None,
        &format!(
            "<form class=\"login panel\" method=post action=\"/ui/login\"><h1>gantry</h1><p class=muted>Paste an API token (the admin's is in <code>admin.token</code> in the controller's data directory; <code>gantry token create</code> makes others). The browser keeps a session, never the token.</p>{error}<input type=hidden name=csrf value=\"{csrf}\"><input type=hidden name=next value=\"{}\"><input type=password name=token autofocus autocomplete=off placeholder=\"gty_…\"><button>Log in</button></form>",
            esc(next)
        ),
    );
    let cookie = session::set_cookie(session::CSRF_COOKIE, &csrf, "/ui/login", session::LOGIN_FORM_TTL_S);
    (status, [(header::SET_COOKIE, cookie)], html).into_response()
}

/// `GET /ui/login[?next=/ui/…]`: the form. (A token in the URL is never read: URLs end up in
/// histories, logs and `Referer` headers.)
async fn login_form(uri: axum::http::Uri) -> Response {
    let next = uri.query().and_then(|q| form_field(q, "next"));
    login_page(StatusCode::OK, "", &safe_next(next))
}

fn form_field(body: &str, name: &str) -> Option<String> {
    body.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| percent_decode(v))
}

/// `POST /ui/login`: the CSRF value matches its cookie, the token is one a person may use;
/// then a session opens and the browser goes on.
async fn login(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let next = safe_next(form_field(&body, "next"));
    let posted = form_field(&body, "csrf").unwrap_or_default();
    let expected = session::cookie(&headers, session::CSRF_COOKIE).unwrap_or_default();
    if expected.is_empty() || !session::same(&posted, &expected) {
        return login_page(
            StatusCode::FORBIDDEN,
            "The login form expired or came from elsewhere: log in again.",
            &next,
        );
    }
    let token = form_field(&body, "token").unwrap_or_default();
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && shared.read(|c| c.authenticate(&token, crate::now_s())).is_ok_and(|w| w.not_agent().is_ok());
    if !valid {
        return login_page(StatusCode::UNAUTHORIZED, "Unknown or revoked token.", &next);
    }
    let Some(id) = shared.ui_sessions.open(token, now_s()) else {
        return failure(ControlError::Internal("cannot read /dev/urandom for a session".into()));
    };
    let session = session::set_cookie(session::SESSION_COOKIE, &id, "/ui", session::SESSION_TTL_S);
    let spent = session::set_cookie(session::CSRF_COOKIE, "", "/ui/login", 0);
    let mut response = Redirect::to(&next).into_response();
    for cookie in [session, spent] {
        if let Ok(value) = axum::http::HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// `POST /ui/logout`: the session ends here and in the browser.
async fn logout(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(id) = session::cookie(&headers, session::SESSION_COOKIE) {
        shared.ui_sessions.close(&id);
    }
    let cookie = session::set_cookie(session::SESSION_COOKIE, "", "/ui", 0);
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

/// Where a login goes on: a page of the dashboard, never elsewhere (no open redirect).
fn safe_next(next: Option<String>) -> String {
    next.filter(|n| {
        n.starts_with("/ui/") && !n.contains("//") && !n.contains('\\') && n.chars().all(|c| c.is_ascii_graphic())
    })
    .unwrap_or_else(|| "/ui/fleet".into())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
