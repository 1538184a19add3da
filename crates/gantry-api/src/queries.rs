//! The query strings the API's GET and DELETE calls take: the server reads them with these
//! types and the CLI writes them with [`Query::to_query`], so a parameter renamed on one side
//! is renamed on the other.

use crate::usage::UsageBy;
use gantry_wire::LogStream;
use serde::Deserialize;

/// A query string's parameters, written as `?a=1&b=2` (empty when there are none).
pub trait Query {
    /// Each parameter given, as (name, value) with the value not yet encoded.
    fn pairs(&self) -> Vec<(&'static str, String)>;

    /// The query string, values percent-encoded.
    fn to_query(&self) -> String {
        let pairs: Vec<String> = self.pairs().into_iter().map(|(k, v)| format!("{k}={}", encoded(&v))).collect();
        if pairs.is_empty() { String::new() } else { format!("?{}", pairs.join("&")) }
    }
}

/// A query string value, percent-encoded (task names are printable, not URL-safe).
pub fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' | b',' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /v1/jobs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Comma-separated states (`pending,running`); all when absent.
    #[param(
        pattern = "^(pending|running|completed|failed|cancelled|lost)(,(pending|running|completed|failed|cancelled|lost))*$"
    )]
    pub state: Option<String>,
}

impl Query for ListQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        self.state.iter().map(|s| ("state", s.clone())).collect()
    }
}

/// `DELETE /v1/jobs/{id}`: with `force`, tasks on nodes whose agent is unreachable count as
/// ended now, instead of waiting for an agent that may never report them.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CancelQuery {
    #[serde(default)]
    pub force: bool,
}

impl Query for CancelQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        if self.force { vec![("force", "true".into())] } else { Vec::new() }
    }
}

/// `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// One task, `GROUP/REPLICA` (default: every task, the first 64 of a larger job).
    pub task: Option<String>,
    /// `out` or `err` (default: both).
    pub stream: Option<LogStream>,
    /// Only the last this many lines of each stream.
    #[param(maximum = 4_294_967_295_f64)]
    pub tail: Option<u32>,
    /// Read from this byte: one task and one stream only (a follower's next read).
    #[param(maximum = 9_223_372_036_854_775_807_f64)]
    pub offset: Option<u64>,
    /// `text` (default) or `json` (`LogsView`).
    #[param(pattern = "^(text|json)$")]
    pub format: Option<String>,
}

impl Query for LogsQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        pairs.extend(self.format.iter().map(|f| ("format", f.clone())));
        pairs.extend(self.task.iter().map(|t| ("task", t.clone())));
        pairs.extend(self.stream.map(|s| ("stream", s.name().to_string())));
        pairs.extend(self.tail.map(|n| ("tail", n.to_string())));
        pairs.extend(self.offset.map(|o| ("offset", o.to_string())));
        pairs
    }
}

/// `GET /v1/usage`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Start, Unix seconds (rounded down to the hour), not after `to`. Default: 30 days ago.
    #[param(maximum = 9_223_372_036_854_775_807_f64)]
    pub from: Option<u64>,
    /// End, Unix seconds (rounded up to the hour). Default: now.
    #[param(maximum = 9_223_372_036_854_775_807_f64)]
    pub to: Option<u64>,
    /// Group by `user`, `queue`, `model` or `job`. Default: queue.
    pub by: Option<UsageBy>,
}

impl Query for UsageQuery {
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        pairs.extend(self.by.map(|b| ("by", b.name().to_string())));
        pairs.extend(self.from.map(|f| ("from", f.to_string())));
        pairs.extend(self.to.map(|t| ("to", t.to_string())));
        pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_travel_percent_encoded() {
        assert_eq!(encoded("main/0"), "main/0");
        assert_eq!(encoded("a b&c=d/1"), "a%20b%26c%3Dd/1");
        assert_eq!(encoded("é/2"), "%C3%A9/2");
    }

    #[test]
    fn queries_write_what_the_server_reads() {
        let logs =
            LogsQuery { task: Some("a b/0".into()), stream: Some(LogStream::Err), tail: Some(5), ..Default::default() };
        assert_eq!(logs.to_query(), "?task=a%20b/0&stream=err&tail=5");
        assert_eq!(ListQuery::default().to_query(), "");
        assert_eq!(ListQuery { state: Some("pending,running".into()) }.to_query(), "?state=pending,running");
        assert_eq!(CancelQuery { force: true }.to_query(), "?force=true");
        let usage = UsageQuery { from: Some(1), to: None, by: Some(UsageBy::User) };
        assert_eq!(usage.to_query(), "?by=user&from=1");
    }
}
