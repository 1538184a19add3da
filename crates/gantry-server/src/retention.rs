//! How much command log the live service keeps (`[log]` in the controller's config file).
//! The service checkpoints every `checkpoint_every` (at the first quiet moment after it comes
//! due) and the store then deletes the log before the newest checkpoint at or before `keep`
//! ago: `gantry replay` always has at least `keep` of history, and at most that plus one
//! checkpoint interval. Events, jobs and the usage ledger are never deleted.

use crate::error::ServeError;

/// Longest interval between checkpoints: a week (a replay starts at a checkpoint, and a
/// longer stretch with none keeps that much log whatever the retention says).
pub const CHECKPOINT_EVERY_MAX_S: u64 = 7 * 86_400;
/// Longest retention: ten years (past that, a number is more likely a typo than a wish).
pub const KEEP_MAX_S: u64 = 3650 * 86_400;
/// A checkpoint not taken (nothing was quiet) is tried again this much later, seconds: it
/// costs a scan of the running jobs, not worth repeating every tick.
pub const CHECKPOINT_RETRY_S: u64 = 60;

/// The `[log]` table: `checkpoint_every = "24h"` (or `"off"`), `keep = "7d"` (or `"all"`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "LogFile")]
pub struct LogRetention {
    /// Seconds between checkpoints (`None`: never, and nothing is deleted).
    pub checkpoint_every_s: Option<u64>,
    /// Seconds of log kept (`None`: all of it).
    pub keep_s: Option<u64>,
}

impl Default for LogRetention {
    fn default() -> Self {
        LogRetention { checkpoint_every_s: Some(86_400), keep_s: Some(7 * 86_400) }
    }
}

/// `[log]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogFile {
    checkpoint_every: Option<String>,
    keep: Option<String>,
}

impl TryFrom<LogFile> for LogRetention {
    type Error = String;

    fn try_from(file: LogFile) -> Result<Self, String> {
        let defaults = LogRetention::default();
        let read = |field: &str, text: Option<String>, word: &str, default: Option<u64>, min: u64| match text {
            None => Ok(default),
            Some(t) if t.trim() == word => Ok(None),
            Some(t) => {
                gantry_spec::duration_seconds(field, &t, min).map(Some).map_err(|e| format!("{e} (or \"{word}\")"))
            }
        };
        let retention = LogRetention {
            checkpoint_every_s: read(
                "log.checkpoint_every",
                file.checkpoint_every,
                "off",
                defaults.checkpoint_every_s,
                1,
            )?,
            keep_s: read("log.keep", file.keep, "all", defaults.keep_s, 0)?,
        };
        retention.check().map_err(|e| e.to_string())?;
        Ok(retention)
    }
}

impl LogRetention {
    pub fn check(&self) -> Result<(), ServeError> {
        if let Some(every) = self.checkpoint_every_s
            && !(1..=CHECKPOINT_EVERY_MAX_S).contains(&every)
        {
            return Err(ServeError::Config(format!(
                "log.checkpoint_every = {every} s: 1 s to {CHECKPOINT_EVERY_MAX_S} s (a week), or \"off\""
            )));
        }
        if let Some(keep) = self.keep_s
            && keep > KEEP_MAX_S
        {
            return Err(ServeError::Config(format!(
                "log.keep = {keep} s: at most {KEEP_MAX_S} s (ten years), or \"all\""
            )));
        }
        if self.keep_s.is_some() && self.checkpoint_every_s.is_none() {
            return Err(ServeError::Config(
                "log.keep needs checkpoints (log.checkpoint_every not \"off\"): the log is deleted only up to one"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// When the next checkpoint is due, as the scheduling loop tracks it.
#[derive(Debug)]
pub(crate) struct Due {
    every_s: Option<u64>,
    next_s: u64,
}

impl Due {
    pub fn new(retention: &LogRetention, now: u64) -> Due {
        let every_s = retention.checkpoint_every_s;
        Due { every_s, next_s: now.saturating_add(every_s.unwrap_or(0)) }
    }

    pub fn is_due(&self, now: u64) -> bool {
        self.every_s.is_some() && now >= self.next_s
    }

    /// Taken: the next in a full interval; not taken: try again shortly.
    pub fn after(&mut self, taken: bool, now: u64) {
        let every = self.every_s.unwrap_or(0);
        self.next_s = now + if taken { every } else { CHECKPOINT_RETRY_S.min(every) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LogRetention, String> {
        #[derive(serde::Deserialize)]
        struct File {
            log: LogRetention,
        }
        toml::from_str::<File>(text).map(|f| f.log).map_err(|e| e.message().to_string())
    }

    #[test]
    fn retention_refuses_what_cannot_hold_and_comes_due_on_time() {
        assert_eq!(parse("[log]\n"), Ok(LogRetention::default()));
        assert_eq!(
            parse("[log]\ncheckpoint_every = \"6h\"\nkeep = \"30d\"\n"),
            Ok(LogRetention { checkpoint_every_s: Some(6 * 3600), keep_s: Some(30 * 86_400) })
        );
        assert_eq!(
            parse("[log]\ncheckpoint_every = \"off\"\nkeep = \"all\"\n"),
            Ok(LogRetention { checkpoint_every_s: None, keep_s: None })
        );
        for (bad, says) in [
            ("checkpoint_every = \"8d\"", "a week"),
            ("checkpoint_every = \"0s\"", "outside 1 s"),
            ("keep = \"3651d\"", "ten years"),
            ("keep = \"-1d\"", "negative"),
            ("keep = \"soon\"", "log.keep"),
            ("checkpoint_every = \"off\"", "needs checkpoints"),
            ("keep_days = 7", "unknown field"),
        ] {
            let error = parse(&format!("[log]\n{bad}\n")).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
        let mut due = Due::new(&LogRetention::default(), 1_000);
        assert!(!due.is_due(1_000 + 86_399) && due.is_due(1_000 + 86_400));
        due.after(false, 90_000);
        assert!(!due.is_due(90_059) && due.is_due(90_060), "retried a minute later");
        due.after(true, 90_060);
        assert!(due.is_due(90_060 + 86_400));
        let never = Due::new(&LogRetention { checkpoint_every_s: None, keep_s: None }, 0);
        assert!(!never.is_due(u64::MAX));
    }
}
