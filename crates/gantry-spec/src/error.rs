//! One error type for every spec file: where (file and field path), what, and a hint.

use std::fmt;

/// A spec that cannot be used. Nothing from a file with an error is ever applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Field path, e.g. `job "train" / task "worker" / gpu.count`.
    pub field: String,
    pub message: String,
    pub hint: Option<String>,
    /// The input is over a size limit (its name and value) rather than wrong: a service
    /// answers 413 naming it.
    pub limit: Option<(&'static str, u64)>,
}

impl SpecError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> SpecError {
        SpecError { field: field.into(), message: message.into(), hint: None, limit: None }
    }

    /// Mark the error as a size limit exceeded (`name`, its `value`).
    pub fn limit(mut self, name: &'static str, value: u64) -> SpecError {
        self.limit = Some((name, value));
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> SpecError {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)?;
        } else {
            write!(f, "{}: {}", self.field, self.message)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecError {}

/// A TOML syntax or schema error (unknown field, wrong type), with its line and column; for
/// an unknown field, the entry it is in (`node "n1"`, `job "train"`) and the nearest valid key.
pub(crate) fn from_toml(kind: &str, text: &str, err: toml::de::Error) -> SpecError {
    let message = err.to_string();
    let message = message.trim_end().replace('\n', "\n  ");
    let field = err.span().and_then(|span| enclosing_entry(text, span.start)).unwrap_or_default();
    let format_hint = format!("see docs/formats.md for the {kind} format");
    let hint = match unknown_field(err.message()).and_then(|(field, expected)| nearest(field, &expected)) {
        Some(near) => format!("did you mean `{near}`? ({format_hint})"),
        None => format_hint,
    };
    SpecError::new(field, format!("not a valid {kind} file: {message}")).hint(hint)
}

/// Where `name = "X"` is written in `text`, for a name used twice: " (lines 2 and 6)", or
/// nothing when it is not written literally (a template's `count` made it).
pub(crate) fn name_lines(text: &str, name: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            line.trim()
                .strip_prefix("name")
                .map(str::trim_start)
                .and_then(|v| v.strip_prefix('='))
                .is_some_and(|v| v.trim().trim_matches('"') == name)
        })
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    match lines.as_slice() {
        [] | [_] => String::new(),
        [rest @ .., last] => format!(" (lines {} and {last})", rest.join(", ")),
    }
}

/// `unknown field `X`, expected one of `a`, `b``: X and the valid names.
fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2).collect();
    Some((field, expected))
}

/// The valid name closest to `typo` by edit distance, if close enough to be a typo (at most a
/// third of its length, and at least one edit).
fn nearest<'a>(typo: &str, valid: &[&'a str]) -> Option<&'a str> {
    // Ties go to the longer common prefix (`gpu` is nearer `gpus` than `cpu`).
    let prefix = |v: &str| typo.chars().zip(v.chars()).take_while(|(a, b)| a == b).count();
    let (distance, _, best) = valid.iter().map(|v| (edit_distance(typo, v), std::cmp::Reverse(prefix(v)), *v)).min()?;
    (distance <= (typo.chars().count() / 3).max(1)).then_some(best)
}

/// Levenshtein distance (insertions, deletions, substitutions), over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The `[[node]]`, `[[job]]` or `[[queue]]` entry around byte `at` of `text`, as a field path
/// (`node "n1"`; `node 2` when it has no name yet), or `None` outside any.
fn enclosing_entry(text: &str, at: usize) -> Option<String> {
    let at = at.min(text.len());
    let header = |line: &str| match line.trim() {
        "[[node]]" => Some("node"),
        "[[job]]" => Some("job"),
        "[[queue]]" => Some("queue"),
        _ => None,
    };
    let mut entry: Option<(&str, usize, usize)> = None; // (kind, ordinal, byte offset of the body)
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if offset > at {
            break;
        }
        if let Some(kind) = header(line) {
            let n = counts.entry(kind).or_default();
            *n += 1;
            entry = Some((kind, *n, offset + line.len()));
        }
        offset += line.len();
    }
    let (kind, ordinal, body) = entry?;
    // Its `name`, looked for up to the next entry header (at top level of the entry).
    let mut name = None;
    for line in text[body..].lines() {
        if header(line).is_some() {
            break;
        }
        if line.trim_start().starts_with('[') {
            break;
        }
        if let Some(value) = line.trim().strip_prefix("name").map(str::trim_start).and_then(|v| v.strip_prefix('=')) {
            name = Some(value.trim().trim_matches('"').to_string());
            break;
        }
    }
    Some(match name {
        Some(name) => format!("{kind} {name:?}"),
        None => format!("{kind} {ordinal}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_nearest_key_and_strangers_do_not() {
        let keys = ["name", "cpu", "memory", "gpus", "command"];
        assert_eq!(nearest("memroy", &keys), Some("memory"));
        assert_eq!(nearest("comand", &keys), Some("command"));
        assert_eq!(nearest("gpu", &keys), Some("gpus"));
        assert_eq!(nearest("colour", &keys), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn the_entry_around_an_offset_is_named() {
        let text = "[[job]]\nname = \"a\"\n[[job]]\ngpu = 1\nname = \"train\"\n[job.env]\nX = \"1\"\n";
        assert_eq!(enclosing_entry("version = 1\n[[job]]\n", 0), None);
        assert_eq!(enclosing_entry(text, text.find("gpu").expect("gpu")), Some("job \"train\"".into()));
        assert_eq!(enclosing_entry(text, text.find("X =").expect("X")), Some("job \"train\"".into()));
        assert_eq!(enclosing_entry("[[node]]\ncpu = 1\n", 10), Some("node 1".into()));
    }
}
