//! `gantry whatif`: a cluster's own history beside what gantry would have done with it — the
//! question a Slurm or Kubernetes site asks before adopting gantry. The history as it happened
//! (each job's recorded start), gantry's replay of the same arrivals with its default policy,
//! fair share and backfill, the same on a MIG layout planned for the history's demand, and the
//! fewest GPUs on which gantry would have served it no worse.

use anyhow::{Context, bail};
use clap::Args;
use gantry_sim::protocol_b::{self, Backfill, Order, ReplayOptions};
use gantry_sim::whatif::{self, Column};
use std::fmt::Write as _;
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
            let imported =
                gantry_spec::import_sacct(&crate::import_cmd::read(path)?, &source, gantry_spec::QueueFrom::Partition)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            for (why, n) in &imported.skipped {
                eprintln!("left out of {}: {n} × {why}", path.display());
            }
            let trace = gantry_spec::read_trace(std::io::Cursor::new(imported.jsonl), catalog, args.lenient)
                .map_err(|e| anyhow::anyhow!("{} (imported): {e}", path.display()))?;
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
    let (history_name, jobs) = history_jobs(&args, &fleet)?;
    let options =
        ReplayOptions { order: fair_share(&args, &jobs)?, backfill: Backfill::Reserve, ..ReplayOptions::default() };
    let mut runs = Vec::new();
    if let Some(history) = whatif::history(&fleet, catalog, &jobs) {
        runs.push(history);
    }
    let replay = |name: &str, fleet: &gantry_types::Fleet| -> anyhow::Result<whatif::Run> {
        let r = protocol_b::run_trace(fleet, catalog, &jobs, gantry_engine::Policy::Default, 0, &options)?;
        Ok(whatif::replayed(name, fleet, &jobs, &r))
    };
    let gantry = replay("gantry", &fleet)?;
    runs.push(gantry.clone());
    runs.push(best_plan(&fleet, &jobs, &replay, &gantry)?);
    let columns = whatif::columns(&runs);
    let sufficed = whatif::sufficed(&fleet, catalog, &jobs, &options, &columns[0], &gantry)?;
    let report = Report { fleet: args.fleet.display().to_string(), history: history_name, columns, sufficed };
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

/// The MIG layout to show: the planner's plans for the history's demand counted three ways
/// (mean concurrency per shape; the same with every shape at least once; peak), each replayed,
/// and the one that starts the most jobs with the shortest p90 wait kept — a static plan
/// cannot serve at once what ran at different times, and the replay is what tells which
/// compromise serves the history best. Today's layout (`today`, its replay already run) is a
/// candidate too: when no plan does better, the column says so.
fn best_plan(
    fleet: &gantry_types::Fleet,
    jobs: &[gantry_spec::TraceJob],
    replay: &dyn Fn(&str, &gantry_types::Fleet) -> anyhow::Result<whatif::Run>,
    today: &whatif::Run,
) -> anyhow::Result<whatif::Run> {
    use gantry_sim::native::DemandOf;
    let catalog = gantry_catalog::Catalog::embedded();
    let today = whatif::Run { name: "gantry + MIG plan (today's layout is best)".into(), ..today.clone() };
    let score = |run: &whatif::Run| {
        let column = whatif::columns(std::slice::from_ref(run)).remove(0);
        (column.started, std::cmp::Reverse(column.waits.p90_s))
    };
    let today_score = score(&today);
    let mut best = (today, today_score);
    let mut tried: Vec<gantry_types::Fleet> = vec![fleet.clone()];
    for (how, label) in
        [(DemandOf::Mean, "mean"), (DemandOf::MeanEveryShape, "mean, every shape"), (DemandOf::Peak, "peak")]
    {
        let demand = gantry_sim::native::concurrent_demand(jobs, how);
        if demand.is_empty() {
            continue;
        }
        let plan = gantry_engine::plan::plan(fleet, &demand, catalog)
            .map_err(|e| anyhow::anyhow!("planning a MIG layout: {e}"))?;
        if tried.contains(&plan.fleet) {
            continue;
        }
        tried.push(plan.fleet.clone());
        let name = format!("gantry + MIG plan ({} GPUs change, {label} demand)", plan.reconfigured);
        let run = replay(&name, &plan.fleet)?;
        let run_score = score(&run);
        if run_score > best.1 {
            best = (run, run_score);
        }
    }
    Ok(best.0)
}

struct Report {
    fleet: String,
    history: String,
    columns: Vec<Column>,
    sufficed: Option<Column>,
}

/// Seconds as a person reads a wait: `45 s`, `12 min`, `3.5 h`.
fn wait(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

impl Report {
    /// Rows of (label, one cell per column).
    fn rows(&self) -> Vec<(String, Vec<String>)> {
        let cols = &self.columns;
        let row = |label: &str, f: &dyn Fn(&Column) -> String| (label.to_string(), cols.iter().map(f).collect());
        let mut rows = vec![
            row("GPUs", &|c| c.fleet_gpus.to_string()),
            row("jobs started", &|c| format!("{} of {}", c.started, c.jobs)),
            row("wait p50", &|c| wait(c.waits.p50_s)),
            row("wait p90", &|c| wait(c.waits.p90_s)),
            row("wait p99", &|c| wait(c.waits.p99_s)),
            row("last job done after", &|c| wait(c.makespan_s)),
            row("GPU-hours held", &|c| format!("{:.1}", c.gpu_hours)),
            row("mean allocation", &|c| format!("{:.1} %", c.mean_alloc_pct)),
            row("peak GPUs held", &|c| format!("{:.1}", c.peak_gpus)),
            row("mean utilization", &|c| {
                c.mean_util_pct.map_or_else(|| "not in the trace".into(), |u| format!("{u:.1} %"))
            }),
        ];
        let queues: std::collections::BTreeSet<&String> = cols.iter().flat_map(|c| c.waits_by_queue.keys()).collect();
        for q in queues {
            let cell = |c: &Column| {
                c.waits_by_queue.get(q).map_or_else(|| "-".into(), |w| format!("{} / {}", wait(w.p50_s), wait(w.p90_s)))
            };
            rows.push((format!("queue {q}: wait p50 / p90"), cols.iter().map(cell).collect()));
        }
        rows
    }

    fn sufficed_line(&self) -> String {
        let against = &self.columns[0].name;
        match &self.sufficed {
            Some(s) => format!(
                "GPUs that would have sufficed: {} of {} ({}: wait p90 {} against {} for \"{against}\", every job started)",
                s.fleet_gpus,
                self.columns[0].fleet_gpus,
                s.name,
                wait(s.waits.p90_s),
                wait(self.columns[0].waits.p90_s)
            ),
            None => format!(
                "GPUs that would have sufficed: none fewer (gantry's replay on the whole fleet does not match \"{against}\")"
            ),
        }
    }

    fn text(&self) -> String {
        let mut out = format!("what if: {} on {}\n\n", self.history, self.fleet);
        let rows = self.rows();
        let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| rows.iter().map(|(_, c)| c[i].len()).chain([self.columns[i].name.len()]).max().unwrap_or(0))
            .collect();
        let _ = write!(out, "{:label_width$}", "");
        for (c, w) in self.columns.iter().zip(&widths) {
            let _ = write!(out, "  {:>w$}", c.name);
        }
        out.push('\n');
        for (label, cells) in rows {
            let _ = write!(out, "{label:label_width$}");
            for (cell, w) in cells.iter().zip(&widths) {
                let _ = write!(out, "  {cell:>w$}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "\n{}", self.sufficed_line());
        out
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "gantry.whatif/v1",
            "fleet": self.fleet,
            "history": self.history,
            "columns": self.columns,
            "sufficed": self.sufficed,
        })
    }

    fn html(&self) -> String {
        let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        let mut out = String::from(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>gantry what-if</title>\n<style>\
             body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}\
             th,td{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child{text-align:left}\
             </style></head><body>\n",
        );
        let _ = writeln!(
            out,
            "<h1>What if gantry had scheduled it</h1>\n<p>{} on {}</p>",
            esc(&self.history),
            esc(&self.fleet)
        );
        out.push_str("<table><tr><th></th>");
        for c in &self.columns {
            let _ = write!(out, "<th>{}</th>", esc(&c.name));
        }
        out.push_str("</tr>\n");
        for (label, cells) in self.rows() {
            let _ = write!(out, "<tr><td>{}</td>", esc(&label));
            for cell in cells {
                let _ = write!(out, "<td>{}</td>", esc(&cell));
            }
            out.push_str("</tr>\n");
        }
        let _ = writeln!(out, "</table>\n<p>{}</p>", esc(&self.sufficed_line()));
        out.push_str(
            "<p>Waits are from arrival to start. GPU figures are over one window, from the first arrival to \
             the last end in any column; MIG instances and shares count as their part of a GPU. Utilization \
             is shown only when the trace records it. Made by <code>gantry whatif</code>.</p>\n</body></html>\n",
        );
        out
    }
}
