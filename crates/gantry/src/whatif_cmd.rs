//! `gantry whatif`: a cluster's own history beside what gantry would have done with it — the
//! question a Slurm or Kubernetes site asks before adopting gantry. The history as it happened
//! (each job's recorded start), gantry's replay of the same arrivals with its default policy,
//! fair share and backfill, the same on a MIG layout planned for the history's demand, and the
//! fewest GPUs on which gantry would have served it no worse.

use anyhow::{Context, bail};
use clap::Args;
use gantry_sim::protocol_b::{Backfill, Order, ReplayOptions};
use gantry_sim::whatif::analysis::{Analysis, analyse};
use gantry_sim::whatif::report::Report;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # Slurm: the cluster and last month's accounting
  gantry import slurm --conf slurm.conf --gres gres.conf --map a100=A100-SXM4-80GB --queues-out queues.toml > fleet.toml
  sacct --parsable2 --allocations --allusers --starttime now-30days --format=JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,ReqTRES,AllocTRES,NNodes,Priority,QOS,ExitCode > sacct.txt
  gantry whatif --fleet fleet.toml --sacct sacct.txt --map a100=A100-SXM4-80GB --queues queues.toml --html whatif.html
  # Kubernetes: nodes and pods
  gantry import kubernetes --nodes nodes.json > fleet.toml
  gantry import kubernetes --pods pods.json > trace.jsonl
  gantry whatif --fleet fleet.toml --trace trace.jsonl";

#[derive(Args)]
pub struct WhatifArgs {
    /// The cluster as a fleet file (`gantry import slurm` or `import kubernetes --nodes`).
    #[arg(long, value_name = "FILE")]
    fleet: PathBuf,
    /// The history as a native trace; jobs with `started_s` (the importers write it) make the
    /// "as it happened" column.
    #[arg(long, value_name = "FILE", required_unless_present = "sacct", conflicts_with = "sacct")]
    trace: Option<PathBuf>,
    /// The history as Slurm's accounting (`sacct --parsable2 --allocations`, docs/formats.md),
    /// imported as `gantry import sacct` does.
    #[arg(long, value_name = "FILE")]
    sacct: Option<PathBuf>,
    /// With --sacct: a gres type as a catalog model (`a100=A100-SXM4-80GB`), repeatable.
    #[arg(long = "map", value_name = "TYPE=MODEL", requires = "sacct")]
    maps: Vec<String>,
    /// The queue tree fair share orders by (`gantry import slurm --queues-out`, `import
    /// kueue`); default: one queue per queue of the history, equal weights.
    #[arg(long, value_name = "FILE")]
    queues: Option<PathBuf>,
    /// Skip and count jobs that are not valid or fit no node, instead of refusing the history.
    #[arg(long)]
    lenient: bool,
    /// Also write the report as a self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the report as JSON (schema `gantry.whatif/v1`).
    #[arg(long)]
    json: bool,
}

/// The history's jobs, read and checked against the fleet.
fn history_jobs(
    args: &WhatifArgs,
    fleet: &gantry_types::Fleet,
) -> anyhow::Result<(String, Vec<gantry_spec::TraceJob>)> {
    let catalog = gantry_catalog::Catalog::embedded();
    let (name, trace) = match (&args.trace, &args.sacct) {
        (Some(path), _) => {
            let file = std::fs::File::open(path).with_context(|| format!("cannot read trace {}", path.display()))?;
            let trace = gantry_spec::read_trace(std::io::BufReader::new(file), catalog, args.lenient)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            (path.display().to_string(), trace)
        }
        (None, Some(path)) => {
            let map = crate::import_cmd::maps(&args.maps, catalog)?;
            let source = gantry_spec::SlurmSource {
                name: path.display().to_string(),
                catalog,
                map: &map,
                lenient: args.lenient,
            };
            let text = crate::import_cmd::read(path)?;
            let trace = gantry_spec::sacct_trace(&text, &source, gantry_spec::QueueFrom::Partition)?;
            (path.display().to_string(), trace)
        }
        (None, None) => bail!("give the history: --trace FILE or --sacct FILE"),
    };
    for (why, n) in &trace.skipped {
        eprintln!("left out of {name}: {n} × {why}");
    }
    let (jobs, unfit) = gantry_sim::native::check_fits(fleet, catalog, trace.jobs, args.lenient)
        .map_err(|e| anyhow::anyhow!("{name} on {}: {e}", args.fleet.display()))?;
    for (why, n) in &unfit {
        eprintln!("left out of {name}: {n} × {why}");
    }
    if jobs.is_empty() {
        bail!("{name}: no job to replay");
    }
    Ok((name, jobs))
}

fn fair_share(args: &WhatifArgs, jobs: &[gantry_spec::TraceJob]) -> anyhow::Result<Order> {
    let tree = gantry_sim::experiment::queue_tree(args.queues.as_deref(), jobs.iter().map(|j| j.job.queue.as_str()))?;
    if let Some(j) = jobs.iter().find(|j| tree.find(&j.job.queue).is_none()) {
        let file = args.queues.as_ref().map_or_else(String::new, |q| format!(" {}", q.display()));
        bail!(
            "job {:?} (line {}) is in queue {:?}, which the queue file{file} does not have",
            j.job.name,
            j.line,
            j.job.queue
        );
    }
    Ok(Order::FairShare(tree))
}

pub fn run(args: WhatifArgs) -> anyhow::Result<ExitCode> {
    // clap skips `requires` when a conflicting flag is present, so this is checked here.
    if !args.maps.is_empty() && args.sacct.is_none() {
        bail!("--map applies to --sacct (a native trace names catalog models already)");
    }
    let catalog = gantry_catalog::Catalog::embedded();
    let (_, fleet) = crate::place_cmd::load_fleet(Some(&args.fleet), catalog)?;
    let (history, jobs) = history_jobs(&args, &fleet)?;
    let options =
        ReplayOptions { order: fair_share(&args, &jobs)?, backfill: Backfill::Reserve, ..ReplayOptions::default() };
    let Analysis { columns, sufficed } = analyse(&fleet, catalog, &jobs, &options)?;
    let report = Report { fleet: args.fleet.display().to_string(), history, columns, sufficed };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(path) = &args.html {
        std::fs::write(path, report.html()).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
