//! `gantry replay`: re-run the live controller's command log through a fresh state machine
//! and report whether every decision comes out the same (the first difference if not).

use anyhow::{Context, bail};
use clap::Args;
use gantry_server::replay::ReplayReport;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry replay                        # the default data directory's log
  gantry replay --data /var/lib/gantry # a copy someone sent, or the live one
  gantry replay --store postgres://gantry@db/gantry
  gantry replay --data DIR --json

What is replayed is what the controller's retention keeps ([log] keep_days, 7 by default):
from the newest checkpoint at or before that window's start, opened from the jobs as they
were there.

Exit status: 0 when every decision is identical, 1 at the first difference, 2 on an error.";

#[derive(Args)]
pub struct ReplayArgs {
    /// The controller's data directory (its gantry.db holds the command log). Default:
    /// $GANTRY_DATA, else $XDG_DATA_HOME/gantry or ~/.local/share/gantry.
    #[arg(long, conflicts_with = "store")]
    data: Option<PathBuf>,
    /// A PostgreSQL store (`postgres://…`) instead: read only, beside a running controller.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (store, name): (Box<dyn gantry_store::Store>, String) = match args.store {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let store = gantry_store::PostgresStore::open(&url).context("opening the PostgreSQL store")?;
            let name = store.url().to_string();
            (Box::new(store), name)
        }
        Some(other) => bail!("--store {other:?}: a postgres:// URL (for SQLite, --data DIR)"),
        None => {
            let dir = match args.data {
                Some(dir) => dir,
                None => crate::serve_cmd::default_data_dir()?,
            };
            let db = dir.join("gantry.db");
            if !db.exists() {
                bail!("{} does not exist: point --data at a controller's data directory", db.display());
            }
            let store = gantry_store::SqliteStore::open(&db).with_context(|| format!("opening {}", db.display()))?;
            (Box::new(store), db.display().to_string())
        }
    };
    let report = gantry_server::replay::replay(store.as_ref(), gantry_catalog::Catalog::embedded())
        .with_context(|| format!("replaying {name}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &name);
    }
    Ok(if report.first_difference.is_some() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn print_report(report: &ReplayReport, db: &str) {
    let kinds: Vec<String> = report.commands.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("replayed {} log entries of {db} ({})", report.total(), kinds.join(", "));
    if report.events_before > 0 {
        println!(
            "the kept log begins at entry {} (time {}), a checkpoint: opened there from the {} job events before it",
            report.from_seq, report.from_s, report.events_before
        );
    }
    println!(
        "decisions: {} starts (with their placements), {} endings, {} requeues, {} launches, {} stops; pending reasons compared at {} ticks",
        report.starts, report.ends, report.requeues, report.launches, report.stops, report.reasons_checked
    );
    let pct = if report.compared == 0 { 100.0 } else { 100.0 * report.identical as f64 / report.compared as f64 };
    println!("identical: {} of {} ({pct:.1} %)", report.identical, report.compared);
    match &report.first_difference {
        None if report.total() == 0 => println!("the log is empty (a store written before gantry kept a command log?)"),
        None => println!("every decision replays identically"),
        Some(d) => println!("first difference: entry {} ({} at {}): {}", d.seq, d.command, d.at_s, d.detail),
    }
}

/// `gantry checkpoint` (admin).
#[derive(Args)]
pub struct CheckpointArgs {
    #[command(flatten)]
    server: crate::jobs_cmd::ServerArg,
}

/// Ask the controller to checkpoint now: retention then deletes the command log before the
/// newest checkpoint at or before its window's start.
pub fn checkpoint(args: CheckpointArgs) -> anyhow::Result<ExitCode> {
    let (reply, sent): (gantry_api::Checkpointed, serde_json::Value) = args.server.fetch("POST", "/v1/checkpoint")?;
    let code = if reply.taken { ExitCode::SUCCESS } else { ExitCode::from(1) };
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
        return Ok(code);
    }
    let kept = match reply.keep_log_s {
        Some(s) => format!("the command log before the newest checkpoint at least {} ago is deleted", span(s)),
        None => "retention keeps the whole log ([log] keep = \"all\")".into(),
    };
    if reply.taken {
        println!("checkpoint taken: {kept}");
    } else {
        println!("no checkpoint now: {} (try again shortly)", reply.why.as_deref().unwrap_or("not quiet"));
    }
    Ok(code)
}

/// Seconds as the largest whole unit that fits: `7 days`, `12 h`, `90 s`.
fn span(s: u64) -> String {
    match s {
        s if s >= 86_400 && s.is_multiple_of(86_400) => format!("{} day(s)", s / 86_400),
        s if s >= 3600 && s.is_multiple_of(3600) => format!("{} h", s / 3600),
        s => format!("{s} s"),
    }
}
