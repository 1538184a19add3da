//! `gantry sim`: replay a trace under one or more policies: the Alibaba trace under Protocol A
//! (the FGD paper's) or in time (Protocol B), or a native JSON-lines trace in time.

use anyhow::{Context, anyhow, bail};
use clap::Args;
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, PodLists, Skipped};
use gantry_sim::experiment::sweep::Sweep;
use gantry_sim::experiment::{output, reference, summary};
use gantry_sim::protocol_a;
use gantry_sim::protocol_b;
use gantry_sim::{TraceNode, TracePod};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # the FGD protocol on the Alibaba trace, FGD and best-fit, seed 42
  gantry sim --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv --policy fgd,best-fit --seed 42
  # replay the reference run's exact arrival order and compare decisions
  gantry sim --nodes ... --pods ... --policy fgd --arrivals 06-FGD/decisions.csv --compare 06-FGD/decisions.csv
  # the Alibaba trace in time: arrivals compressed 200x, a waiting queue, metrics over time
  gantry sim --nodes ... --pods ... --protocol time-replay --compress 200 --report out/
  # a native trace (JSON lines, see docs/formats.md) on a fleet file, here a synthetic one
  gantry synth --jobs 2000 --seed 7 --out trace.jsonl
  gantry sim --fleet examples/demo-fleet.toml --trace trace.jsonl --policy default,best-fit --report out/";

#[derive(Args)]
pub struct SimArgs {
    /// Node list (Alibaba trace CSV: sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long, value_name = "FILE", requires = "pods", conflicts_with_all = ["trace", "fleet"])]
    nodes: Option<PathBuf>,
    /// Pod list(s) (Alibaba trace CSV), comma-separated; each is simulated separately.
    #[arg(long, value_name = "FILE", value_delimiter = ',', requires = "nodes")]
    pods: Vec<PathBuf>,
    /// Native trace: JSON lines of job specs with arrival_s, duration_s (docs/formats.md);
    /// replayed in time on --fleet.
    #[arg(long, value_name = "FILE", required_unless_present_any = ["nodes", "sacct"])]
    trace: Option<PathBuf>,
    /// Slurm's accounting history (`sacct --parsable2 --allocations --format=…`, the fields
    /// in docs/formats.md), imported as `gantry import sacct` would and replayed in time on
    /// --fleet (`gantry import slurm` makes one from slurm.conf). --map TYPE=MODEL for its
    /// GPU types.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["trace", "nodes"])]
    sacct: Option<PathBuf>,
    /// With --sacct: a gres type as a catalog model (`a100=A100-SXM4-80GB`), repeatable.
    #[arg(long = "map", value_name = "TYPE=MODEL", requires = "sacct")]
    maps: Vec<String>,
    /// Fleet file (TOML, docs/formats.md) for --trace or --sacct; default: the bundled demo
    /// fleet.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// Policies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "default", value_parser = parse_policy)]
    policy: Vec<Policy>,
    /// Seed (arrival order, node order and tie-breaks); with --seeds, the first of the range.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run this many seeds (seed, seed+1, ...) and report each policy's mean; runs use every
    /// core.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    seeds: u32,
    /// Protocol: `fgd` (the FGD paper's: arrivals to 130 % of capacity, no departures; the
    /// default for --pods) or `time-replay` (arrival and departure times, a waiting queue,
    /// metrics over time; the only one for --trace).
    #[arg(long, value_parser = ["fgd", "time-replay"])]
    protocol: Option<String>,
    /// time-replay: how the waiting queue is ordered: `fifo` (arrival order), or `fair-share`
    /// (starvation guard, priority, then the lowest weighted dominant share down the queue
    /// tree, then age; the tree from --queues, else one queue per tenant).
    #[arg(long, default_value = "fifo", value_parser = ["fifo", "fair-share"])]
    order: String,
    /// time-replay: what may start past a blocked job: `off` (nothing), `greedy` (later jobs,
    /// up to a bound of placement work per queue; with fair share, a blocked job that has
    /// waited the queue file's `greedy_reserve_after` gets a reserved start, else none: big
    /// jobs can starve) or `reserve` (the first
    /// --reserve-depth blocked jobs get reserved starts from running jobs' time limits; a
    /// later job starts only if it delays none of them).
    #[arg(long, default_value = "greedy", value_parser = ["off", "greedy", "reserve"])]
    backfill: String,
    /// time-replay with --backfill reserve: how many blocked jobs get a reserved start per
    /// pass (1 = EASY backfill; more plans each around the ones before it, and costs more).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=protocol_b::RESERVE_DEPTH_MAX as u64))]
    reserve_depth: u64,
    /// time-replay with --order fair-share: jobs a pass cannot start may stop preemptible work
    /// they have a right to (lower priority; other queues' borrowers, when their queue's
    /// guarantee has room; other queues' work of their priority or lower, once waiting past
    /// the starvation bound), cheapest first by GPU-seconds lost: signal, then kill after the
    /// grace period; the victims wait again. No queue is taken below its guarantee, and a job
    /// a reclaim started is protected for the queue file's `reclaim_protect` (one a reclaim
    /// stopped, once it restarts, is taken only when nothing else will do for as long).
    #[arg(long)]
    preempt: bool,
    /// time-replay: stop at this second of the replay clock and show every waiting job with
    /// its reason and estimated start (as `why` will).
    #[arg(long, value_name = "SECONDS")]
    until: Option<u64>,
    /// time-replay: print the jobs still waiting at the end (or at --until), why, and their
    /// estimated start.
    #[arg(long)]
    why: bool,
    /// time-replay with --order fair-share: the queue file (TOML, docs/formats.md): tree,
    /// weights, half-life, starvation bound, billing weights.
    #[arg(long, value_name = "FILE")]
    queues: Option<PathBuf>,
    /// time-replay: divide the time between arrivals by this factor (durations unchanged).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    compress: u64,
    /// Replay this exact arrival order (a `decisions.csv` with a `pod` column) instead of
    /// inflating with the seed.
    #[arg(long, value_name = "FILE")]
    arrivals: Option<PathBuf>,
    /// Compare each decision with this reference `decisions.csv` (pod,node) and report the
    /// agreement rate.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
    /// Skip malformed trace (or --sacct) rows (and say how many and why) instead of refusing
    /// the file.
    #[arg(long)]
    lenient: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// With --trace: replay through the live controller (the state machine `gantry serve`
    /// runs, on the simulator's clock, with simulated tasks) instead of the engine-only time
    /// replay; same order, backfill and preemption flags. Reports starts, endings, waits and
    /// preemptions, and writes the same --decisions-out events.
    #[arg(long, requires = "trace", conflicts_with_all = ["seeds", "until", "why", "report", "compress"])]
    live: bool,
    /// Write every decision to this CSV file: under Protocol A each arrival's placement
    /// (seq,pod_list,policy,pod,node,gpu_index); in a time replay every job's start, end, stop
    /// (with its preemptor and right) and kill
    /// (trace,policy,seed,time_s,event,job,queue,milli,preemptor,cause,kill_at_s).
    #[arg(long, value_name = "FILE")]
    decisions_out: Option<PathBuf>,
    /// The FGD authors' 10-seed curves (`analysis_allo_discrete.csv`), to compare means with.
    #[arg(long, value_name = "FILE")]
    authors: Option<PathBuf>,
    /// Write a markdown table of mean allocation at 130 % (pod list × policy) to this file.
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Write a report to this folder: for Protocol A curves.csv and one SVG chart per pod list
    /// (allocation against arrived load, one line per policy); for time replays series.csv and
    /// one SVG per trace (allocation and utilization over time); report.html embedding them.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    if args.fleet.is_some() && args.trace.is_none() && args.sacct.is_none() {
        bail!("--fleet is the fleet a --trace or --sacct replays on (Alibaba pod lists bring their --nodes)");
    }
    if let Some(sacct) = &args.sacct {
        return sacct_replay(&args, sacct);
    }
    if let Some(trace) = &args.trace {
        if args.protocol.as_deref() == Some("fgd") {
            bail!(
                "--protocol fgd replays Alibaba pod lists (--nodes, --pods); a native --trace replays in time \
                 (--protocol time-replay)"
            );
        }
        only_protocol_a_flags(&args, false)?;
        let file = std::fs::File::open(trace).with_context(|| format!("cannot read trace {}", trace.display()))?;
        return native_replay(&args, trace, std::io::BufReader::new(file));
    }
    let Some(nodes_path) = &args.nodes else {
        bail!("give --nodes and --pods (Alibaba trace) or --trace (native trace)")
    };
    let (nodes, lists) = read_pod_lists(&args, nodes_path)?;
    let replaying = args.protocol.as_deref() == Some("time-replay");
    only_protocol_a_flags(&args, !replaying)?;
    if replaying {
        return time_replay(&args, &nodes, &lists);
    }
    protocol_a_sweep(&args, &nodes, &lists)
}

/// The node list and every pod list (named by file stem), each pod checked against the nodes.
fn read_pod_lists(args: &SimArgs, nodes_path: &Path) -> anyhow::Result<(Vec<TraceNode>, PodLists)> {
    let mode = if args.lenient { Mode::Lenient } else { Mode::Strict };
    let mut skipped = Skipped::default();
    let nodes = alibaba::read_nodes(nodes_path, mode, &mut skipped)?;
    if nodes.iter().all(|n| n.gpus == 0) {
        bail!("{}: no GPUs in the node list", nodes_path.display());
    }
    let lists = alibaba::read_pod_lists(&nodes, &args.pods, mode, &mut skipped)?;
    if let Some(line) = skipped.summary() {
        eprintln!("{line}");
    }
    Ok((nodes, lists))
}

/// Protocol A: one run per (pod list, policy, seed), then the means, the report and files.
fn protocol_a_sweep(
    args: &SimArgs,
    nodes: &[TraceNode],
    lists: &[(String, Vec<TracePod>)],
) -> anyhow::Result<ExitCode> {
    if args.seeds > 1 && args.arrivals.is_some() {
        bail!("--seeds draws a new arrival order per seed; it cannot be combined with --arrivals");
    }
    if args.arrivals.is_some() && lists.len() > 1 {
        bail!("--arrivals replays one pod list; give a single --pods file");
    }
    let reference = args.compare.as_deref().map(reference::read_decisions).transpose()?;
    let authors = args.authors.as_deref().map(reference::read_authors).transpose()?;
    let fixed = args.arrivals.as_deref().map(|path| reference::fixed_order(path, nodes, &lists[0].1)).transpose()?;
    let keep_decisions = args.decisions_out.is_some() || reference.is_some();
    let (policies, first_seed, seeds) = (&args.policy[..], args.seed, args.seeds);
    let sweep = Sweep { nodes, lists, policies, first_seed, seeds, fixed, keep_decisions };
    let bar = progress_bar(sweep.jobs().len());
    let result = sweep.run(|| bar.iter().for_each(|b| b.inc(1)))?;
    bar.iter().for_each(ProgressBar::finish_and_clear);
    if !args.json && args.markdown.is_none() {
        print!("{}", summary::sweep(&sweep, &result, reference.as_deref(), authors.as_ref()));
    }
    if let Some(path) = &args.markdown {
        output::write(path, result.markdown(&sweep, authors.as_ref()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.report {
        output::sweep_report(dir, lists, &result)?;
        eprintln!("wrote report to {}", dir.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&result.named(lists))?);
    }
    if let Some(path) = &args.decisions_out {
        output::write(path, result.decisions_csv(lists))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A progress bar on stderr for more than one run.
fn progress_bar(runs: usize) -> Option<ProgressBar> {
    (runs > 1).then(|| {
        let bar = ProgressBar::new(runs as u64);
        let style = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {elapsed} (eta {eta})");
        bar.set_style(style.expect("valid template"));
        bar
    })
}

fn only_protocol_a_flags(args: &SimArgs, protocol_a: bool) -> anyhow::Result<()> {
    if protocol_a {
        if args.compress != 1 {
            bail!("--compress applies to --protocol time-replay; Protocol A has no clock");
        }
        if args.order != "fifo"
            || args.queues.is_some()
            || args.backfill != "greedy"
            || args.preempt
            || args.reserve_depth != 1
            || args.until.is_some()
            || args.why
        {
            bail!(
                "--order, --queues, --backfill, --reserve-depth, --preempt, --until and --why apply to --protocol \
                 time-replay; Protocol A has no queue"
            );
        }
        return Ok(());
    }
    if args.reserve_depth != 1 && args.backfill != "reserve" {
        bail!("--reserve-depth needs --backfill reserve");
    }
    if args.queues.is_some() && args.order != "fair-share" {
        bail!("--queues is read by --order fair-share");
    }
    if args.preempt && args.order != "fair-share" {
        bail!("--preempt needs --order fair-share (FIFO ignores priority)");
    }
    let given = [
        ("--arrivals", args.arrivals.is_some()),
        ("--compare", args.compare.is_some()),
        ("--authors", args.authors.is_some()),
        ("--markdown", args.markdown.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        bail!("{flag} applies to Protocol A (--protocol fgd on --pods), not to a time replay");
    }
    Ok(())
}

/// `--protocol time-replay` on the Alibaba trace: one run per (pod list, policy, seed).
fn time_replay(
    args: &SimArgs,
    nodes: &[gantry_sim::TraceNode],
    lists: &[(String, Vec<gantry_sim::TracePod>)],
) -> anyhow::Result<ExitCode> {
    let mut traces = Vec::new();
    for (name, pods) in lists {
        let order = queue_order(args, pods.iter().map(|p| if p.qos.is_empty() { "default" } else { p.qos.as_str() }))?;
        let mut runs = Vec::new();
        for &policy in &args.policy {
            for seed in args.seed..args.seed + args.seeds as u64 {
                let started = std::time::Instant::now();
                let nodes_order = protocol_a::seeded_node_order(nodes, seed);
                let r = protocol_b::run(nodes, pods, &nodes_order, policy, seed, &replay_options(args, &order))?;
                print_replay(args, name, &r, started.elapsed().as_secs_f64());
                runs.push(r);
            }
        }
        traces.push((name.clone(), runs));
    }
    finish_replay(args, &traces)
}

/// `--sacct FILE`: Slurm's history imported into a native trace and replayed in time, as
/// `--trace` replays one.
fn sacct_replay(args: &SimArgs, path: &Path) -> anyhow::Result<ExitCode> {
    if args.protocol.as_deref() == Some("fgd") {
        bail!("--protocol fgd replays Alibaba pod lists; --sacct replays in time (--protocol time-replay)");
    }
    only_protocol_a_flags(args, false)?;
    let catalog = gantry_catalog::Catalog::embedded();
    let map = crate::import_cmd::maps(&args.maps, catalog)?;
    let text = crate::import_cmd::read(path)?;
    let source =
        gantry_spec::SlurmSource { name: path.display().to_string(), catalog, map: &map, lenient: args.lenient };
    let imported = gantry_spec::import_sacct(&text, &source, gantry_spec::QueueFrom::Partition)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (why, n) in &imported.skipped {
        eprintln!("left out of {}: {n} × {why}", path.display());
    }
    native_replay(args, path, imported.jsonl.as_bytes())
}

/// `--trace FILE [--fleet FILE]`: a native trace replayed in time (`text`, read from `path`).
fn native_replay(args: &SimArgs, path: &Path, text: impl std::io::BufRead) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    let (fleet_name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
    let trace = gantry_spec::read_trace(text, catalog, args.lenient).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let (jobs, unfit) = gantry_sim::native::check_fits(&fleet, catalog, trace.jobs, args.lenient)
        .map_err(|e| anyhow!("{} on {fleet_name}: {e}", path.display()))?;
    let skipped: u64 = trace.skipped.values().chain(unfit.values()).sum();
    if skipped > 0 {
        let reasons: Vec<String> = trace.skipped.iter().chain(&unfit).map(|(why, n)| format!("{n} × {why}")).collect();
        eprintln!("skipped {skipped} trace lines: {}", reasons.join("; "));
    }
    let order = queue_order(args, jobs.iter().map(|j| j.job.queue.as_str()))?;
    if let protocol_b::Order::FairShare(tree) = &order {
        check_queues(args, path, tree, &fleet, &jobs)?;
    }
    let name = alibaba::stem(path);
    if args.live {
        return live_replay(args, &name, fleet, &jobs, &order);
    }
    let mut runs = Vec::new();
    for &policy in &args.policy {
        for seed in args.seed..args.seed + u64::from(args.seeds) {
            let started = std::time::Instant::now();
            let r = protocol_b::run_trace(&fleet, catalog, &jobs, policy, seed, &replay_options(args, &order))?;
            print_replay(args, &name, &r, started.elapsed().as_secs_f64());
            runs.push(r);
        }
    }
    finish_replay(args, &[(name, runs)])
}

/// Warn of guarantees the fleet cannot honour; refuse a job whose queue is not in the tree.
fn check_queues(
    args: &SimArgs,
    path: &Path,
    tree: &gantry_types::QueueTree,
    fleet: &gantry_types::Fleet,
    jobs: &[gantry_spec::TraceJob],
) -> anyhow::Result<()> {
    for w in gantry_engine::quota::quota_warnings(tree, &gantry_engine::quota::fleet_capacity(fleet)) {
        eprintln!("warning: {w}");
    }
    let Some(j) = jobs.iter().find(|j| tree.find(&j.job.queue).is_none()) else { return Ok(()) };
    bail!(
        "{}: line {} / job {:?}: unknown queue {:?} (not in {})",
        path.display(),
        j.line,
        j.job.name,
        j.job.queue,
        args.queues.as_ref().map_or_else(|| "the queue file".into(), |q| q.display().to_string())
    )
}

/// `--live`: the trace through the live controller in simulated time.
fn live_replay(
    args: &SimArgs,
    name: &str,
    fleet: gantry_types::Fleet,
    jobs: &[gantry_spec::TraceJob],
    order: &protocol_b::Order,
) -> anyhow::Result<ExitCode> {
    let options = replay_options(args, order);
    let scheduling = gantry_engine::sched::SchedulerConfig {
        order: order.clone(),
        backfill: options.backfill,
        reserve_depth: options.reserve_depth,
        preempt: options.preempt,
        keep_unsatisfiable: false,
    };
    let started = std::time::Instant::now();
    let r = gantry_server::live_sim::run(fleet, jobs, &scheduling, gantry_catalog::Catalog::embedded())?;
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("{}", r.summary_line(name, &args.order, &args.backfill, wall));
    }
    if let Some(path) = &args.decisions_out {
        output::write(path, r.events_csv(name))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The queue order for a time replay: FIFO, or fair share over --queues (else one queue per
/// tenant of the trace, default half-life and starvation bound).
fn queue_order<'a>(args: &SimArgs, tenants: impl Iterator<Item = &'a str>) -> anyhow::Result<protocol_b::Order> {
    if args.order == "fifo" {
        return Ok(protocol_b::Order::Fifo);
    }
    Ok(protocol_b::Order::FairShare(gantry_sim::experiment::queue_tree(args.queues.as_deref(), tenants)?))
}

fn replay_options(args: &SimArgs, order: &protocol_b::Order) -> protocol_b::ReplayOptions {
    protocol_b::ReplayOptions {
        compress: args.compress,
        order: order.clone(),
        backfill: protocol_b::Backfill::parse(&args.backfill).unwrap_or(protocol_b::Backfill::Greedy),
        preempt: args.preempt,
        reserve_depth: args.reserve_depth as usize,
        until_s: args.until,
    }
}

fn print_replay(args: &SimArgs, name: &str, r: &protocol_b::ReplayResult, secs: f64) {
    if !args.json {
        println!("{}", summary::replay(name, r, secs, args.why));
    }
}

/// JSON, the report folder and the events CSV of time replays.
fn finish_replay(args: &SimArgs, traces: &output::Traces) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.report {
        output::replay_report(dir, traces)?;
        eprintln!("wrote report to {}", dir.display());
    }
    if let Some(path) = &args.decisions_out {
        output::write(path, output::replay_events_csv(traces))?;
        eprintln!("wrote {}", path.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&output::named_replays(traces))?);
    }
    Ok(ExitCode::SUCCESS)
}
