//! `gantry usage`: chargeback from the controller's accounting ledger — allocation and
//! measured use side by side, the waste between them, in GPU-hours and money — and the CPU
//! time and memory peak the nodes' cgroups measured of the same jobs.

use crate::jobs_cmd::ServerArg;
use anyhow::bail;
use clap::Args;
use gantry_api::queries::{Query, UsageQuery};
use gantry_api::{UsageLine, text};
use gantry_types::time;
use serde_json::Value;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry usage                               # the last 30 days, by queue
  gantry usage --from -7d --by user          # the last week, by user
  gantry usage --from 2026-11-01 --to 2026-12-01 --by model --csv > november.csv
  gantry usage --by job --json";

#[derive(Args)]
pub struct UsageArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Start: YYYY-MM-DD (UTC), YYYY-MM-DDTHH:MM, Unix seconds, or -N[mhd] before now.
    /// Default: 30 days ago. Rounded down to the hour.
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// End, in the same forms, or `now` (the default). Rounded up to the hour.
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Group by user, queue, model or job.
    #[arg(long, default_value = "queue", value_parser = ["user", "queue", "model", "job"])]
    by: String,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
}

pub fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let now = gantry_server::now_s();
    let from = args
        .from
        .as_deref()
        .map(|t| time::parse_time(t, now))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--from: {e}"))?;
    let to =
        args.to.as_deref().map(|t| time::parse_time(t, now)).transpose().map_err(|e| anyhow::anyhow!("--to: {e}"))?;
    if let (Some(f), Some(t)) = (from, to)
        && f > t
    {
        bail!("--from is after --to");
    }
    let by = serde_json::from_value(Value::String(args.by.clone()))?;
    let path = format!("/v1/usage{}", UsageQuery { from, to, by: Some(by) }.to_query());
    let (lines, sent): (Vec<UsageLine>, Value) = args.server.fetch("GET", &path)?;
    if args.server.json {
        println!("{}", serde_json::to_string_pretty(&sent)?);
    } else if args.csv {
        print!("{}", text::usage::usage_csv(&args.by, &lines));
    } else {
        print!("{}", text::usage::usage_table(&args.by, &lines));
    }
    Ok(ExitCode::SUCCESS)
}
