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

/// A TOML syntax or schema error (unknown field, wrong type), with its line and column.
pub(crate) fn from_toml(kind: &str, err: toml::de::Error) -> SpecError {
    let message = err.to_string();
    let message = message.trim_end().replace('\n', "\n  ");
    SpecError::new("", format!("not a valid {kind} file: {message}"))
        .hint(format!("see docs/formats.md for the {kind} format"))
}
