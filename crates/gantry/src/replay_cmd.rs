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
  gantry replay --data DIR --json

Exit status: 0 when every decision is identical, 1 at the first difference, 2 on an error.";

#[derive(Args)]
pub struct ReplayArgs {
    /// The controller's data directory (its gantry.db holds the command log). Default:
    /// $GANTRY_DATA, else ~/.local/share/gantry.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let dir = match args.data {
        Some(dir) => dir,
        None => crate::serve_cmd::default_data_dir()?,
    };
    let db = dir.join("gantry.db");
    if !db.exists() {
        bail!("{} does not exist: point --data at a controller's data directory", db.display());
    }
    let store = gantry_store::SqliteStore::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let report = gantry_server::replay::replay(&store, gantry_catalog::Catalog::embedded())
        .with_context(|| format!("replaying {}", db.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &db);
    }
    Ok(if report.first_difference.is_some() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn print_report(report: &ReplayReport, db: &std::path::Path) {
    let kinds: Vec<String> = report.commands.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("replayed {} log entries of {} ({})", report.total(), db.display(), kinds.join(", "));
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
