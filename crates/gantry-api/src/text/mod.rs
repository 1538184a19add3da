//! How a terminal shows the API's views: the tables and lines `gantry queue`, `show`, `why`,
//! `nodes`, `token list` and `usage` print, built from the same typed values the JSON carries.
//! Everything stored that reaches a terminal goes through [`shown`]: a name or reason from an
//! older store, or a node that lies, cannot send an escape sequence to the user's terminal.

pub mod jobs;
pub mod nodes;
pub mod tokens;
pub mod usage;

use gantry_types::text::printable;

/// `writeln!` into a `String`, which cannot fail.
macro_rules! put {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}
pub(crate) use put;

/// Stored text as the terminal may show it: an unprintable character (an escape sequence, a
/// bidirectional override — the controller refuses them in names, but a store may predate
/// that) is written as `\u{…}`, never sent raw.
pub fn shown(s: &str) -> String {
    if s.chars().all(printable) {
        return s.to_string();
    }
    s.chars().map(|c| if printable(c) { c.to_string() } else { c.escape_unicode().to_string() }).collect()
}

/// A task's output as the terminal may show it: lines and tabs as they are, any other
/// unprintable character (an escape sequence a job printed) written as `\u{…}`.
pub fn shown_log(s: &str) -> String {
    s.split_inclusive('\n')
        .map(|line| {
            let (body, end) = line.strip_suffix('\n').map_or((line, ""), |b| (b, "\n"));
            let body: String = body.split('\t').map(shown).collect::<Vec<_>>().join("\t");
            body + end
        })
        .collect()
}

/// Seconds since the Unix epoch as `2026-11-21 19:41:26 UTC`, `-` when absent.
pub fn utc(t: Option<u64>) -> String {
    let Some(t) = t else { return "-".into() };
    let (days, secs) = ((t / 86_400) as i64, t % 86_400);
    let (year, month, day) = gantry_types::time::civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Ids as a short list: runs of three or more consecutive ids as `first-last` (an array of
/// 4,096 jobs reads `1-4096`, not four thousand numbers).
pub fn id_ranges(ids: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}-{}", ids[i], ids[j]));
        } else {
            parts.extend(ids[i..=j].iter().map(u64::to_string));
        }
        i = j + 1;
    }
    parts.join(" ")
}

/// An enum's name as the API writes it (`read-only`, `draining`, `auto`).
pub fn kebab<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_never_reaches_the_terminal_raw() {
        assert_eq!(shown("train-1 [ok]"), "train-1 [ok]");
        assert_eq!(shown("\u{1b}[2Jowned"), "\\u{1b}[2Jowned");
        assert_eq!(shown("a\u{202e}b\u{7}"), "a\\u{202e}b\\u{7}");
        assert_eq!(shown_log("a\tb\n\u{1b}[31mred\n\nend"), "a\tb\n\\u{1b}[31mred\n\nend");
    }

    #[test]
    fn consecutive_ids_read_as_ranges() {
        assert_eq!(id_ranges(&[]), "");
        assert_eq!(id_ranges(&[1, 2]), "1 2");
        assert_eq!(id_ranges(&[1, 2, 3, 7, 9, 10, 11, 12]), "1-3 7 9-12");
        assert_eq!(id_ranges(&(5..=4100).collect::<Vec<_>>()), "5-4100");
    }

    #[test]
    fn epoch_seconds_read_as_utc_dates() {
        assert_eq!(utc(Some(0u64)), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(Some(951_782_400u64)), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(Some(1_795_290_086u64)), "2026-11-21 19:41:26 UTC");
        assert_eq!(utc(None), "-");
    }
}
