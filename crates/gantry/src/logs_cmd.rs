//! `gantry logs`: a job's task output from whichever node runs it (the controller reads it
//! from the node's agent), all tasks or one, one stream or both, the last lines, and `-f` to
//! follow it until the job ends (each stream read on from where the last read stopped).

use crate::jobs_cmd::{ServerArg, shown, shown_log};
use clap::Args;
use gantry_api::{JobView, LogPiece, LogsView};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

pub const EXAMPLES: &str = "Examples:
  gantry logs 42                      # every task's stdout and stderr (the last 256 KiB of each)
  gantry logs 42 --task main/0 --tail 100
  gantry logs 42 -f --stream err      # follow stderr until the job ends
  gantry logs 42 --json               # pieces with their node, offsets and notes";

#[derive(Args)]
pub struct LogsArgs {
    /// Job id.
    id: u64,
    /// Keep printing new output until the job ends.
    #[arg(long, short)]
    follow: bool,
    /// One task, as GROUP/REPLICA (`gantry show` lists them); default: all (the first 64).
    #[arg(long, value_name = "GROUP/REPLICA")]
    task: Option<String>,
    /// Only stdout (out) or stderr (err).
    #[arg(long, value_parser = ["out", "err"])]
    stream: Option<String>,
    /// Only the last N lines of each stream (with -f: to start with).
    #[arg(long, value_name = "N")]
    tail: Option<usize>,
    #[command(flatten)]
    server: ServerArg,
}

/// How often -f asks again.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// A query string value, percent-encoded (task names are printable, not URL-safe).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl LogsArgs {
    fn path(&self, format: &str, task: Option<&str>, offset: Option<u64>, tail: Option<usize>) -> String {
        let mut query = vec![format!("format={format}")];
        query.extend(task.or(self.task.as_deref()).map(|t| format!("task={}", encoded(t))));
        query.extend(self.stream.as_ref().map(|s| format!("stream={s}")));
        query.extend(tail.map(|n| format!("tail={n}")));
        query.extend(offset.map(|o| format!("offset={o}")));
        format!("/v1/jobs/{}/logs?{}", self.id, query.join("&"))
    }
}

pub fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    if args.server.json {
        let view = args.server.call("GET", &args.path("json", None, None, args.tail), None)?;
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    if !args.follow {
        let text = args.server.call("GET", &args.path("text", None, None, args.tail), None)?;
        print!("{}", text.as_str().map_or_else(|| text.to_string(), shown_log));
        return Ok(ExitCode::SUCCESS);
    }
    follow(&args)
}

/// Where each stream of each run was read up to: (attempt, task, stream) → byte.
type Cursors = BTreeMap<(u64, String, String), u64>;

/// Print new output as it comes until the job ends (then read once more: it has all).
fn follow(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let mut cursors = Cursors::new();
    let mut shown = Shown::default();
    loop {
        let (job, _): (JobView, _) = args.server.fetch("GET", &format!("/v1/jobs/{}", args.id))?;
        let attempt = u64::from(job.row.requeues);
        let tasks: Vec<String> = job
            .row
            .tasks
            .iter()
            .map(|t| format!("{}/{}", t.group, t.replica))
            .filter(|t| args.task.as_ref().is_none_or(|want| want == t))
            .collect();
        for task in &tasks {
            for piece in next_pieces(args, &cursors, attempt, task)? {
                cursors.insert((attempt, task.clone(), piece.stream.clone()), piece.end);
                shown.print(&job.row.name, &piece);
            }
        }
        std::io::stdout().flush()?;
        if job.row.state.is_final() {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// What `task` printed since the cursors of this attempt: a task not read yet, its end (or
/// its last lines) of each stream.
fn next_pieces(args: &LogsArgs, cursors: &Cursors, attempt: u64, task: &str) -> anyhow::Result<Vec<LogPiece>> {
    let known: Vec<(String, u64)> = cursors
        .iter()
        .filter(|((a, t, _), _)| *a == attempt && t == task)
        .map(|((_, _, s), at)| (s.clone(), *at))
        .collect();
    if known.is_empty() {
        return read(args, &args.path("json", Some(task), None, args.tail));
    }
    let mut pieces = Vec::new();
    for (stream, at) in known {
        let path = format!("/v1/jobs/{}/logs?format=json&task={}&stream={stream}&offset={at}", args.id, encoded(task));
        pieces.extend(read(args, &path)?);
    }
    Ok(pieces)
}

/// What `follow` has printed: the last header, and each stream's last note.
#[derive(Default)]
struct Shown {
    header: String,
    notes: BTreeMap<(String, String), String>,
}

impl Shown {
    /// Print `piece` under its header (once per run of pieces of one stream), its note if new.
    fn print(&mut self, name: &str, piece: &LogPiece) {
        let key = (piece.task.clone(), piece.stream.clone());
        let note = piece.note.clone().unwrap_or_default();
        let noted = self.notes.get(&key).cloned().unwrap_or_default();
        if piece.text.is_empty() && (note.is_empty() || note == noted) {
            return;
        }
        let header = format!("==> {} {} ({}) <==\n", shown(name), shown(&piece.task), shown(&piece.stream));
        if header != self.header {
            print!("{header}");
            self.header = header;
        }
        if !note.is_empty() && note != noted {
            println!("gantry: {}", shown_log(&note));
            self.notes.insert(key, note);
        }
        print!("{}", shown_log(&piece.text));
    }
}

fn read(args: &LogsArgs, path: &str) -> anyhow::Result<Vec<LogPiece>> {
    let (view, _): (LogsView, _) = args.server.fetch("GET", path)?;
    Ok(view.pieces)
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
}
