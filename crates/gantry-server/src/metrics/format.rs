//! Which text format a scraper gets. Prometheus asks for OpenMetrics first, but `promtool check
//! metrics`, `curl` and older scrapers read the classic text format (0.0.4), and a
//! `text/plain` answer in OpenMetrics syntax fails them: the `Accept` header decides, as
//! Prometheus's own client libraries negotiate it (highest `q` wins, the earlier on a tie,
//! text 0.0.4 when nothing named matches).

/// An exposition format gantry writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: the classic format promtool lints.
    Text004,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for (`None`: no header).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best: Option<(f32, Format)> = None;
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0_f32;
            for param in parts {
                if let Some(("q", value)) = param.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                    q = value.parse().unwrap_or(0.0);
                }
            }
            let format = match media.as_str() {
                "application/openmetrics-text" => Format::OpenMetrics,
                "text/plain" | "text/*" | "*/*" => Format::Text004,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(top, _)| q > top) {
                best = Some((q, format));
            }
        }
        best.map_or(Format::Text004, |(_, format)| format)
    }
}

/// OpenMetrics text (as the `prometheus-client` crate writes it) rewritten as text 0.0.4: a
/// counter's family is named by its `_total` sample, `info` becomes a gauge named `_info`,
/// `unknown` becomes `untyped`, and `# UNIT` and `# EOF` go (0.0.4 has neither).
pub fn to_text004(openmetrics: &str) -> String {
    let mut renamed: std::collections::BTreeMap<&str, (String, &str)> = Default::default();
    for line in openmetrics.lines() {
        if let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|rest| rest.split_once(' ')) {
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "unknown" => ("", "untyped"),
                other => ("", other),
            };
            renamed.insert(name, (format!("{name}{suffix}"), kind));
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let header = ["# HELP ", "# TYPE "].into_iter().find(|p| line.starts_with(p));
        match header.and_then(|p| line[p.len()..].split_once(' ').map(|(name, rest)| (p, name, rest))) {
            Some((prefix, name, rest)) => {
                let (new_name, kind) = renamed.get(name).map_or((name, rest), |(n, k)| (n.as_str(), *k));
                let rest = if prefix == "# TYPE " { kind } else { rest };
                out.push_str(&format!("{prefix}{new_name} {rest}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_gets_text() {
        let prometheus3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(Format::negotiate(Some(prometheus3)), Format::OpenMetrics);
        let prometheus2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus2)), Format::OpenMetrics);
        for accept in
            [None, Some("*/*"), Some("text/plain"), Some("text/plain;version=0.0.4"), Some("application/json")]
        {
            assert_eq!(Format::negotiate(accept), Format::Text004, "{accept:?}");
        }
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0.2, application/openmetrics-text;q=0.9")),
            Format::OpenMetrics
        );
        assert_eq!(Format::negotiate(Some("application/openmetrics-text;q=0, text/plain")), Format::Text004);
        assert_eq!(Format::negotiate(Some(";;;,,=,q=,application/openmetrics-text;q=x")), Format::Text004);
    }

    #[test]
    fn counters_are_named_by_their_total_and_units_and_eof_go() {
        let om = "# HELP gantry_ends Ends.\n# TYPE gantry_ends counter\ngantry_ends_total{how=\"ok\"} 1.0\n\
                  # HELP gantry_wait_seconds Wait.\n# TYPE gantry_wait_seconds histogram\n# UNIT gantry_wait_seconds seconds\n\
                  gantry_wait_seconds_bucket{le=\"+Inf\"} 0\n# HELP gantry_build Build.\n# TYPE gantry_build info\n\
                  gantry_build_info{version=\"1\"} 1\n# EOF\n";
        let text = to_text004(om);
        assert_eq!(
            text,
            "# HELP gantry_ends_total Ends.\n# TYPE gantry_ends_total counter\ngantry_ends_total{how=\"ok\"} 1.0\n\
             # HELP gantry_wait_seconds Wait.\n# TYPE gantry_wait_seconds histogram\n\
             gantry_wait_seconds_bucket{le=\"+Inf\"} 0\n# HELP gantry_build_info Build.\n# TYPE gantry_build_info gauge\n\
             gantry_build_info{version=\"1\"} 1\n"
        );
    }
}
