//! `gantry logs`: a job's task output from whichever node runs it (the controller reads it
//! from the node's agent), all tasks or one, one stream or both, the last lines, and `-f` to
//! follow it until the job ends (each stream read on from where the last read stopped).

use crate::jobs_cmd::ServerArg;
use clap::Args;
use gantry_api::LogPiece;
use gantry_api::follow::Follower;
use gantry_api::queries::{LogsQuery, Query};
use gantry_api::text::{shown, shown_log};
use gantry_wire::LogStream;
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
    tail: Option<u32>,
    #[command(flatten)]
    server: ServerArg,
}

/// How often -f asks again.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

impl LogsArgs {
    fn path(&self, format: &str, task: Option<&str>, offset: Option<u64>, tail: Option<u32>) -> String {
        let query = LogsQuery {
            format: Some(format.into()),
            task: task.or(self.task.as_deref()).map(str::to_string),
            stream: self.stream.as_deref().map(|s| if s == "out" { LogStream::Out } else { LogStream::Err }),
            tail,
            offset,
        };
        format!("/v1/jobs/{}/logs{}", self.id, query.to_query())
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

/// Print new output as it comes until the job ends (then read once more: it has all).
fn follow(args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let stream = args.stream.as_deref().map(|s| if s == "out" { LogStream::Out } else { LogStream::Err });
    let mut follower = Follower::new(args.id, args.task.clone(), stream, args.tail);
    let conn = args.server.connection();
    let mut shown = Shown::default();
    loop {
        let (job, pieces) = follower.look(&conn)?;
        for piece in &pieces {
            shown.print(&job.row.name, piece);
        }
        std::io::stdout().flush()?;
        if job.row.state.is_final() {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
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
