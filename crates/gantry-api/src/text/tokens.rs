//! Tokens as `gantry token list` prints them: never a secret or a hash.

use super::{kebab, put, shown, utc};
use crate::TokenRecord;

/// Each token: name, role, expiry (against `now`, Unix seconds), and its queues or node.
pub fn tokens_table(list: &[TokenRecord], now: u64) -> String {
    let mut out = String::new();
    put!(out, "{:<24} {:<10} {:<27} QUEUES / NODE", "NAME", "ROLE", "EXPIRES");
    for t in list {
        let mut scope: Vec<String> = t.queues.iter().map(|q| shown(q)).collect();
        scope.extend(t.node.as_deref().map(|n| format!("node {}", shown(n))));
        let expires = match t.expires_at_s {
            None => "never".to_string(),
            Some(at) if at <= now => format!("EXPIRED {}", utc(Some(at))),
            Some(at) => utc(Some(at)),
        };
        let role = kebab(&t.role);
        put!(out, "{:<24} {role:<10} {expires:<27} {}", shown(&t.name), scope.join(","));
    }
    out
}
