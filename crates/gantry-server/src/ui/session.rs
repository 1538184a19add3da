//! Dashboard sessions: the browser never holds an API token. The login form posts a token
//! once (with a CSRF value that must match a cookie the form's page set, so another site
//! cannot log a browser in as someone else); the controller keeps the token in memory under a
//! random session id, and the cookie holds only that id (`HttpOnly; Secure; SameSite=Strict`).
//! Every page re-checks the token, so revoking it ends its sessions at once. Sessions live in
//! memory: a controller restart logs everyone out. Every page also carries headers that keep
//! it out of frames and off other origins' scripts.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The cookie holding a session id.
pub const SESSION_COOKIE: &str = "gantry_session";
/// The cookie holding the login form's CSRF value (double submit).
pub const CSRF_COOKIE: &str = "gantry_login_csrf";
/// How long a session lasts from its login.
pub const SESSION_TTL_S: u64 = 12 * 3600;
/// Most sessions kept at once (the oldest go first): a login flood cannot grow memory.
pub const SESSIONS_MAX: usize = 10_000;
/// How long a login form may be filled in.
pub const LOGIN_FORM_TTL_S: u64 = 600;

/// What the dashboard sends with every page: no framing (clickjacking), no script, styles
/// inline only, forms post to the controller only, nothing leaks in `Referer`, nothing cached.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

#[derive(Debug)]
struct Session {
    secret: String,
    expires_s: u64,
}

/// Open sessions by id.
#[derive(Debug, Default)]
pub struct Sessions {
    inner: Mutex<BTreeMap<String, Session>>,
}

/// A fresh random value for an id or a CSRF value (256 bits, hex).
pub fn random_value() -> Option<String> {
    crate::auth::new_secret().ok().map(|s| s.trim_start_matches("gty_").to_string())
}

impl Sessions {
    /// A new session for `secret` (an API token already checked); its id.
    pub fn open(&self, secret: String, now: u64) -> Option<String> {
        let id = random_value()?;
        let mut sessions = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.expires_s > now);
        if sessions.len() >= SESSIONS_MAX {
            // Full: the oldest tenth go at once, so a flood costs one sort per thousand logins.
            let mut by_age: Vec<(u64, String)> = sessions.iter().map(|(id, s)| (s.expires_s, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.into_iter().take(sessions.len() + 1 - SESSIONS_MAX + SESSIONS_MAX / 10) {
                sessions.remove(&id);
            }
        }
        sessions.insert(id.clone(), Session { secret, expires_s: now + SESSION_TTL_S });
        Some(id)
    }

    /// The token behind session `id`, while it lasts.
    pub fn secret(&self, id: &str, now: u64) -> Option<String> {
        let sessions = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(id).filter(|s| s.expires_s > now).map(|s| s.secret.clone())
    }

    pub fn close(&self, id: &str) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

/// A cookie's value from the request.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A `Set-Cookie` value: `HttpOnly; Secure; SameSite=Strict`, for `path`, lasting `max_age`
/// seconds (0: removed).
pub fn set_cookie(name: &str, value: &str, path: &str, max_age: u64) -> String {
    format!("{name}={value}; HttpOnly; Secure; SameSite=Strict; Path={path}; Max-Age={max_age}")
}

/// Compare two secrets in time that does not depend on where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Middleware for every dashboard response: the security headers.
pub async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_close_and_stay_bounded() {
        let sessions = Sessions::default();
        let a = sessions.open("gty_a".into(), 100).expect("id");
        assert_eq!(a.len(), 64);
        assert_eq!(sessions.secret(&a, 101).as_deref(), Some("gty_a"));
        assert_eq!(sessions.secret(&a, 100 + SESSION_TTL_S), None, "expired");
        let b = sessions.open("gty_b".into(), 200).expect("id");
        sessions.close(&b);
        assert_eq!(sessions.secret(&b, 201), None, "closed");
        assert_eq!(sessions.secret("not-an-id", 201), None);
        for i in 0..SESSIONS_MAX + 5 {
            sessions.open(format!("gty_{i}"), 300 + i as u64).expect("id");
        }
        assert!(sessions.inner.lock().expect("lock").len() <= SESSIONS_MAX);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
