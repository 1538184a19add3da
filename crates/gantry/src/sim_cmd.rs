//! `gantry sim`: replay a trace under one or more policies: the Alibaba trace under Protocol A
//! (the FGD paper's) or in time (Protocol B), or a native JSON-lines trace in time.

use anyhow::{Context, bail};
use clap::Args;
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::{self, ProtocolA};
use gantry_sim::protocol_b;
use std::path::PathBuf;
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

/// Mean allocation at 130 % per (workload, policy) from the authors' curves; their policy
/// directory names (01-Random, ...) mapped to ours.
fn read_authors(path: &PathBuf) -> anyhow::Result<std::collections::BTreeMap<(String, String), f64>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).with_context(|| format!("{}: no `{name}` column", path.display()))
    };
    let (w, p, v) = (col("workload")?, col("sc_policy")?, col("130")?);
    let mut sums: std::collections::BTreeMap<(String, String), (f64, u32)> = Default::default();
    for record in reader.records() {
        let r = record?;
        let policy = match r.get(p).unwrap_or("").split_once('-').map(|(_, n)| n) {
            Some("Random") => "random",
            Some("DotProd") => "dot-product",
            Some("GpuClustering") => "gpu-clustering",
            Some("GpuPacking") => "gpu-packing",
            Some("BestFit") => "best-fit",
            Some("FGD") => "fgd",
            _ => continue,
        };
        let Ok(value) = r.get(v).unwrap_or("").parse::<f64>() else { continue };
        let entry = sums.entry((r.get(w).unwrap_or("").to_string(), policy.to_string())).or_default();
        entry.0 += value;
        entry.1 += 1;
    }
    Ok(sums.into_iter().map(|(k, (sum, n))| (k, sum / n as f64)).collect())
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
}

/// Node ranks from a reference decisions.csv's `NNNN-name` node column.
fn read_node_ranks(path: &PathBuf) -> anyhow::Result<std::collections::BTreeMap<String, u32>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let Some(col) = headers.iter().position(|h| h == "node") else { return Ok(Default::default()) };
    let mut ranks = std::collections::BTreeMap::new();
    for record in reader.records() {
        let record = record?;
        if let Some((prefix, name)) = record.get(col).and_then(|n| n.split_once('-'))
            && let Ok(rank) = prefix.parse::<u32>()
        {
            ranks.insert(name.to_string(), rank);
        }
    }
    Ok(ranks)
}

/// (pod, node) pairs of a decisions.csv; node `None` when FAILED. Node names lose the
/// reference simulator's `NNNN-` prefix.
fn read_decisions(path: &PathBuf) -> anyhow::Result<Vec<(String, Option<String>)>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = reader.headers()?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).with_context(|| format!("{}: no `{name}` column", path.display()))
    };
    let (pod_col, node_col) = (col("pod")?, col("node").ok());
    let mut out = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.with_context(|| format!("{}:{}", path.display(), i + 2))?;
        let pod = record.get(pod_col).unwrap_or("").to_string();
        let node = node_col.and_then(|c| record.get(c)).filter(|n| !n.is_empty() && *n != "FAILED").map(|n| {
            match n.split_once('-') {
                Some((prefix, rest)) if prefix.len() == 4 && prefix.chars().all(|c| c.is_ascii_digit()) => {
                    rest.to_string()
                }
                _ => n.to_string(),
            }
        });
        out.push((pod, node));
    }
    Ok(out)
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
        return native_replay(&args, trace);
    }
    let Some(nodes_path) = &args.nodes else {
        bail!("give --nodes and --pods (Alibaba trace) or --trace (native trace)")
    };
    let mode = if args.lenient { Mode::Lenient } else { Mode::Strict };
    let mut skipped = Skipped::default();
    let nodes = alibaba::read_nodes(nodes_path, mode, &mut skipped)?;
    let capacity: u64 = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    if capacity == 0 {
        bail!("{}: no GPUs in the node list", nodes_path.display());
    }
    let mut lists = Vec::with_capacity(args.pods.len());
    for path in &args.pods {
        let pods = alibaba::read_pods(path, mode, &mut skipped)?;
        let pods = alibaba::check_pods_fit(&nodes, pods, path, mode, &mut skipped)?;
        let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
        lists.push((name, pods));
    }
    report_skipped(&skipped);
    let replaying = args.protocol.as_deref() == Some("time-replay");
    only_protocol_a_flags(&args, !replaying)?;
    if replaying {
        return time_replay(&args, &nodes, &lists);
    }
    if args.seeds > 1 && args.arrivals.is_some() {
        bail!("--seeds draws a new arrival order per seed; it cannot be combined with --arrivals");
    }
    if args.arrivals.is_some() && lists.len() > 1 {
        bail!("--arrivals replays one pod list; give a single --pods file");
    }
    let protocol = ProtocolA::default();
    let reference = args.compare.as_ref().map(read_decisions).transpose()?;
    let authors = args.authors.as_ref().map(read_authors).transpose()?;
    let fixed = match &args.arrivals {
        Some(path) => {
            let names: Vec<String> = read_decisions(path)?.into_iter().map(|(p, _)| p).collect();
            let arrivals = protocol_a::arrivals_from_names(&lists[0].1, &names)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Some((arrivals, protocol_a::ranked_node_order(&nodes, &read_node_ranks(path)?)))
        }
        None => None,
    };
    // One job per (pod list, policy, seed), spread over every core.
    let jobs: Vec<(usize, Policy, u64)> = (0..lists.len())
        .flat_map(|l| args.policy.iter().flat_map(move |&p| (0..args.seeds as u64).map(move |i| (l, p, args.seed + i))))
        .collect();
    let progress = (jobs.len() > 1).then(|| {
        let bar = indicatif::ProgressBar::new(jobs.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {elapsed} (eta {eta})")
                .expect("valid template"),
        );
        bar
    });
    let keep_decisions = args.decisions_out.is_some() || reference.is_some();
    let run_one = |&(list, policy, seed): &(usize, Policy, u64)| -> anyhow::Result<(protocol_a::RunResult, f64)> {
        let started = std::time::Instant::now();
        let pods = &lists[list].1;
        let (arrivals, order) = match &fixed {
            Some((a, o)) => (a.clone(), o.clone()),
            None => {
                (protocol_a::inflate(pods, capacity, protocol.tune, seed), protocol_a::seeded_node_order(&nodes, seed))
            }
        };
        let mut result = protocol_a::run(&nodes, pods, &arrivals, &order, policy, seed, &protocol)?;
        if !keep_decisions {
            // A 1,400-run sweep would otherwise hold 15 million decisions (over 1 GiB).
            result.decisions = Vec::new();
        }
        if let Some(bar) = &progress {
            bar.inc(1);
        }
        Ok((result, started.elapsed().as_secs_f64()))
    };
    let threads = crate::parallel::threads(jobs.len());
    let started = std::time::Instant::now();
    let outcomes = crate::parallel::map(&jobs, run_one);
    let wall = started.elapsed().as_secs_f64();
    if let Some(bar) = &progress {
        bar.finish_and_clear();
    }
    let mut results = Vec::with_capacity(jobs.len());
    for (&(list, policy, seed), outcome) in jobs.iter().zip(outcomes) {
        let (result, secs) = outcome?;
        let agreement = reference.as_ref().map(|r| {
            let same = result.decisions.iter().zip(r).filter(|(d, (_, node))| d.node == *node).count();
            same as f64 / result.decisions.len().max(1) as f64 * 100.0
        });
        if !args.json && args.markdown.is_none() {
            println!(
                "{}{:<14} seed {:<4} arrivals {:>6}  failed {:>5}  alloc@130% {:>6.2}%  final {:>6.2}%{}  ({secs:.2}s)",
                if lists.len() > 1 { format!("{:<26} ", lists[list].0) } else { String::new() },
                policy.name(),
                seed,
                result.arrivals,
                result.failed,
                result.alloc_at(130).unwrap_or(f64::NAN),
                result.final_alloc_pct,
                agreement.map(|a| format!("  agreement {a:.1}%")).unwrap_or_default()
            );
        }
        results.push((list, result));
    }
    let mean = |list: usize, policy: Policy| {
        let values: Vec<f64> = results
            .iter()
            .filter(|(l, r)| *l == list && r.policy == policy.name())
            .filter_map(|(_, r)| r.alloc_at(130))
            .collect();
        values.iter().sum::<f64>() / values.len().max(1) as f64
    };
    if args.seeds > 1 && !args.json && args.markdown.is_none() {
        for (l, (name, _)) in lists.iter().enumerate() {
            println!("\n{name}: mean allocation at 130 % over {} seeds", args.seeds);
            for &policy in &args.policy {
                let theirs = authors.as_ref().and_then(|a| a.get(&(name.clone(), policy.name().to_string())));
                println!(
                    "  {:<14} {:.2}%{}",
                    policy.name(),
                    mean(l, policy),
                    theirs.map(|t| format!("  (authors {t:.2}%)")).unwrap_or_default()
                );
            }
        }
    }
    if let Some(path) = &args.markdown {
        let mut md = format!(
            "Mean GPU allocation at 130 % arrived load, {} seed(s) from {} each, Protocol A (FGD paper). \
             In parentheses: the FGD authors' published 10-seed mean, where they have one. \
             {} runs in {:.0} s on {} threads.\n\n| pod list |",
            args.seeds,
            args.seed,
            jobs.len(),
            wall,
            threads
        );
        for policy in &args.policy {
            md += &format!(" {} |", policy.name());
        }
        md += "\n|---|";
        md += &"---:|".repeat(args.policy.len());
        md += "\n";
        for (l, (name, _)) in lists.iter().enumerate() {
            md += &format!("| {name} |");
            for &policy in &args.policy {
                let theirs = authors.as_ref().and_then(|a| a.get(&(name.clone(), policy.name().to_string())));
                md += &format!(" {:.2}{} |", mean(l, policy), theirs.map(|t| format!(" ({t:.2})")).unwrap_or_default());
            }
            md += "\n";
        }
        std::fs::write(path, md).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let grouped: Vec<(String, gantry_sim::report::ListResults<'_>)> = lists
            .iter()
            .enumerate()
            .map(|(l, (name, _))| {
                let mut by_policy: gantry_sim::report::ListResults<'_> = Default::default();
                for (list, r) in &results {
                    if *list == l {
                        by_policy.entry(r.policy.clone()).or_default().push(r);
                    }
                }
                (name.clone(), by_policy)
            })
            .collect();
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).with_context(|| format!("cannot write {}", dir.join(name).display()))
        };
        write("curves.csv", gantry_sim::report::curves_csv(&grouped))?;
        for (name, by_policy) in &grouped {
            write(&format!("{name}.svg"), gantry_sim::report::allocation_svg(name, by_policy))?;
        }
        write("report.html", gantry_sim::report::html("gantry sim — Protocol A (FGD paper)", &grouped))?;
        eprintln!("wrote report to {}", dir.display());
    }
    if args.json {
        // Each result names its pod list (several lists run in one call).
        #[derive(serde::Serialize)]
        struct Named<'a> {
            pods: &'a str,
            #[serde(flatten)]
            result: &'a protocol_a::RunResult,
        }
        let named: Vec<Named<'_>> =
            results.iter().map(|(l, r)| Named { pods: lists[*l].0.as_str(), result: r }).collect();
        println!("{}", serde_json::to_string_pretty(&named)?);
    }
    if let Some(path) = &args.decisions_out {
        let mut out = String::from("seq,pod_list,policy,pod,node,gpu_index\n");
        for (l, r) in &results {
            for (seq, d) in r.decisions.iter().enumerate() {
                let gpus: Vec<String> = d.gpus.iter().map(u32::to_string).collect();
                out += &format!(
                    "{seq},{},{},{},{},{}\n",
                    lists[*l].0,
                    r.policy,
                    d.name,
                    d.node.as_deref().unwrap_or("FAILED"),
                    gpus.join("-")
                );
            }
        }
        std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuse flags that mean nothing for the protocol being run, rather than ignore them.
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

/// `--sacct FILE`: Slurm's history imported into a native trace (a temporary file, removed
/// after) and replayed in time, as `--trace` replays one.
fn sacct_replay(args: &SimArgs, path: &std::path::Path) -> anyhow::Result<ExitCode> {
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
    let stem = path.file_stem().map_or_else(|| "sacct".into(), |s| s.to_string_lossy().into_owned());
    let dir = std::env::temp_dir().join(format!("gantry-sacct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let trace = dir.join(format!("{stem}.jsonl"));
    std::fs::write(&trace, &imported.jsonl).with_context(|| format!("cannot write {}", trace.display()))?;
    let result = native_replay(args, &trace);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `--trace FILE [--fleet FILE]`: a native trace replayed in time.
fn native_replay(args: &SimArgs, path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    let (fleet_name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read trace {}", path.display()))?;
    let trace = gantry_spec::read_trace(std::io::BufReader::new(file), catalog, args.lenient)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (jobs, unfit) = gantry_sim::native::check_fits(&fleet, catalog, trace.jobs, args.lenient)
        .map_err(|e| anyhow::anyhow!("{} on {fleet_name}: {e}", path.display()))?;
    let skipped: u64 = trace.skipped.values().chain(unfit.values()).sum();
    if skipped > 0 {
        let reasons: Vec<String> = trace.skipped.iter().chain(&unfit).map(|(why, n)| format!("{n} × {why}")).collect();
        eprintln!("skipped {skipped} trace lines: {}", reasons.join("; "));
    }
    let name = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
    let order = queue_order(args, jobs.iter().map(|j| j.job.queue.as_str()))?;
    if let protocol_b::Order::FairShare(tree) = &order {
        for w in gantry_engine::quota::quota_warnings(tree, &gantry_engine::quota::fleet_capacity(&fleet)) {
            eprintln!("warning: {w}");
        }
    }
    if let protocol_b::Order::FairShare(tree) = &order
        && let Some(j) = jobs.iter().find(|j| tree.find(&j.job.queue).is_none())
    {
        bail!(
            "{}: line {} / job {:?}: unknown queue {:?} (not in {})",
            path.display(),
            j.line,
            j.job.name,
            j.job.queue,
            args.queues.as_ref().map_or_else(|| "the queue file".into(), |q| q.display().to_string())
        );
    }
    if args.live {
        return live_replay(args, &name, fleet, &jobs, &order);
    }
    let mut runs = Vec::new();
    for &policy in &args.policy {
        for seed in args.seed..args.seed + args.seeds as u64 {
            let started = std::time::Instant::now();
            let r = protocol_b::run_trace(&fleet, catalog, &jobs, policy, seed, &replay_options(args, &order))?;
            print_replay(args, &name, &r, started.elapsed().as_secs_f64());
            runs.push(r);
        }
    }
    finish_replay(args, &[(name, runs)])
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
    };
    let started = std::time::Instant::now();
    let r = gantry_server::live_sim::run(fleet, jobs, &scheduling, gantry_catalog::Catalog::embedded())?;
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let pct =
            |p: f64| r.waits_s.get(((r.waits_s.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(0);
        println!(
            "{name} (live controller, {} order, {} backfill): {} jobs, {} started, {} completed, {} hit their time limit, {} preemptions; wait p50 {} s, p90 {} s, max {} s; {} commands; ended at {} s; {wall:.2} s",
            args.order,
            args.backfill,
            r.jobs,
            r.started,
            r.completed,
            r.time_limit_ended,
            r.preemptions,
            pct(0.5),
            pct(0.9),
            r.waits_s.last().copied().unwrap_or(0),
            r.commands,
            r.end_s
        );
    }
    if let Some(path) = &args.decisions_out {
        let mut out = String::from("trace,policy,seed,time_s,event,job,queue,milli,preemptor,cause,kill_at_s\n");
        for e in &r.events {
            out.push_str(&format!("{name},live,0,{},{},{},{},,,,\n", e.time_s, e.event, e.job, e.queue));
        }
        std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?;
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
    Ok(protocol_b::Order::FairShare(queue_tree(args.queues.as_deref(), tenants)?))
}

/// The queue tree a replay's fair share orders by: the queue file, or one queue per tenant
/// (equal weights, default half-life and starvation bound).
pub(crate) fn queue_tree<'a>(
    queues: Option<&std::path::Path>,
    tenants: impl Iterator<Item = &'a str>,
) -> anyhow::Result<gantry_types::QueueTree> {
    Ok(match queues {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read queue file {}", path.display()))?;
            gantry_spec::parse_queues(&text, gantry_catalog::Catalog::embedded())
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => {
            let mut names: Vec<&str> = tenants.collect();
            names.sort_unstable();
            names.dedup();
            gantry_types::QueueTree::flat(names, gantry_spec::HALF_LIFE_DEFAULT_S, gantry_spec::STARVATION_DEFAULT_S)
        }
    })
}

fn replay_options(args: &SimArgs, order: &protocol_b::Order) -> protocol_b::ReplayOptions {
    protocol_b::ReplayOptions {
        compress: args.compress,
        order: order.clone(),
        backfill: match args.backfill.as_str() {
            "off" => protocol_b::Backfill::Off,
            "reserve" => protocol_b::Backfill::Reserve,
            _ => protocol_b::Backfill::Greedy,
        },
        preempt: args.preempt,
        reserve_depth: args.reserve_depth as usize,
        until_s: args.until,
    }
}

/// Most waiting jobs `--why` lists (the JSON has them all).
const WHY_ROWS_MAX: usize = 50;

fn print_pending(r: &protocol_b::ReplayResult) {
    let at = r.stopped_at_s.map_or_else(|| "at the end".to_string(), |t| format!("at t={t}s"));
    if r.pending.is_empty() {
        println!("  nothing waiting {at}");
        return;
    }
    println!("  {} jobs waiting {at}:", r.pending.len());
    println!("    {:<24} {:<12} {:>10} {:>10}  why", "job", "queue", "since", "estimate");
    for p in r.pending.iter().take(WHY_ROWS_MAX) {
        let estimate = p.estimate_s.map_or_else(|| "-".to_string(), |e| format!("{e}s"));
        println!("    {:<24} {:<12} {:>10} {:>10}  {}", p.job, p.queue, format!("{}s", p.since_s), estimate, p.reason);
    }
    if r.pending.len() > WHY_ROWS_MAX {
        println!("    ... {} more (--json lists them all)", r.pending.len() - WHY_ROWS_MAX);
    }
}

fn print_replay(args: &SimArgs, name: &str, r: &protocol_b::ReplayResult, secs: f64) {
    if args.json {
        return;
    }
    let tenants: Vec<String> = r.tenant_gpu_share_pct.iter().map(|(t, s)| format!("{t} {s:.1}%")).collect();
    println!(
        "{name} {:<14} {} backfill {} seed {}: started {}/{} (never {}), queueing p50 {}s p90 {}s p99 {}s max {}s, mean alloc {:.1}% (peak {:.1}%) util {:.1}%, GPU time by tenant: {}{}  ({secs:.2}s)",
        r.policy,
        r.order,
        r.backfill,
        r.seed,
        r.started,
        r.pods,
        r.never_started,
        r.delay_p50_s,
        r.delay_p90_s,
        r.delay_p99_s,
        r.delay_max_s,
        r.mean_alloc_pct,
        r.peak_alloc_pct,
        r.mean_util_pct,
        tenants.join(", "),
        r.jain_mean
            .map(|j| format!(
                ", Jain {j:.3} (min {:.3}), weighted {:.3}",
                r.jain_min.unwrap_or(j),
                r.jain_weighted_mean.unwrap_or(j)
            ))
            .unwrap_or_default()
    );
    let waited: u64 = r.wait_job_s_by_reason.values().sum();
    if waited > 0 {
        let mut by: Vec<(&String, &u64)> = r.wait_job_s_by_reason.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> =
            by.iter().take(4).map(|(why, s)| format!("{why} {:.0}%", **s as f64 / waited as f64 * 100.0)).collect();
        println!("  waiting, by why (share of job-time): {}", top.join(", "));
    }
    if r.dependency_never + r.waiting_on_dependencies > 0 {
        println!(
            "  {} jobs dropped (a dependency can never be met), {} still waiting on dependencies",
            r.dependency_never, r.waiting_on_dependencies
        );
    }
    if r.preemptions > 0 {
        let by: Vec<String> = r.preemptions_by_right.iter().map(|(why, n)| format!("{n} for {why}")).collect();
        println!(
            "  {} preemptions ({}), {:.1} GPU-hours of work lost",
            r.preemptions,
            by.join(", "),
            r.preempted_gpu_s_lost / 3600.0
        );
    }
    if r.reserved > 0 {
        let rights: std::collections::BTreeMap<&str, usize> =
            r.promises_broken.iter().fold(Default::default(), |mut m, b| {
                *m.entry(b.right).or_default() += 1;
                m
            });
        let rights: Vec<String> = rights.iter().map(|(why, n)| format!("{n} by {why}")).collect();
        println!(
            "  {} jobs got a reserved start; {} started later than first promised; promises pushed back: {}{}",
            r.reserved,
            r.reserved_late,
            if rights.is_empty() { "none".to_string() } else { rights.join(", ") },
            if r.reserved_late_without_cause.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} with no higher right: {})",
                    r.reserved_late_without_cause.len(),
                    r.reserved_late_without_cause.join(", ")
                )
            }
        );
    }
    if !r.waits_by_queue.is_empty() && r.waits_by_queue.len() > 1 {
        let waits: Vec<String> = r
            .waits_by_queue
            .iter()
            .map(|(q, w)| format!("{q} p50 {}s p90 {}s max {}s", w.p50_s, w.p90_s, w.max_s))
            .collect();
        println!("  waits by queue: {}", waits.join("; "));
    }
    if r.time_limit_ended + r.held + r.user_limit_waited > 0 {
        println!(
            "  {} jobs stopped at their time limit, {} held, {} waited on a per-user limit",
            r.time_limit_ended, r.held, r.user_limit_waited
        );
    }
    if args.why || r.stopped_at_s.is_some() {
        print_pending(r);
    }
}

/// JSON and the report folder for time replays.
fn finish_replay(args: &SimArgs, traces: &[(String, Vec<protocol_b::ReplayResult>)]) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let grouped: Vec<(String, gantry_sim::report::ReplayRuns<'_>)> =
            traces.iter().map(|(name, runs)| (name.clone(), runs.iter().collect())).collect();
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).with_context(|| format!("cannot write {}", dir.join(name).display()))
        };
        write("series.csv", gantry_sim::report::replay_csv(&grouped))?;
        for (name, runs) in &grouped {
            write(
                &format!("{name}.svg"),
                gantry_sim::report::replay_svg(&format!("{name}: allocated and used over time"), runs),
            )?;
        }
        write("report.html", gantry_sim::report::replay_html("gantry sim — time replay", &grouped))?;
        eprintln!("wrote report to {}", dir.display());
    }
    if let Some(path) = &args.decisions_out {
        let mut out = String::from("trace,policy,seed,time_s,event,job,queue,milli,preemptor,cause,kill_at_s\n");
        for (name, runs) in traces {
            for r in runs {
                for e in &r.events {
                    let opt = |v: Option<String>| v.unwrap_or_default();
                    out.push_str(&format!(
                        "{name},{},{},{},{},{},{},{},{},{},{}\n",
                        r.policy,
                        r.seed,
                        e.time_s,
                        e.event,
                        e.job,
                        e.queue,
                        e.milli,
                        opt(e.preemptor.clone()),
                        e.cause.unwrap_or(""),
                        opt(e.kill_at_s.map(|t| t.to_string()))
                    ));
                }
            }
        }
        std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if args.json {
        // Each result names its trace or pod list (several run in one call).
        #[derive(serde::Serialize)]
        struct Named<'a> {
            trace: &'a str,
            #[serde(flatten)]
            result: &'a protocol_b::ReplayResult,
        }
        let all: Vec<Named<'_>> = traces
            .iter()
            .flat_map(|(name, runs)| runs.iter().map(move |result| Named { trace: name.as_str(), result }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Lenient mode's tally on stderr: malformed rows apart from well-formed pods the node list
/// cannot hold (too large, or a GPU model it lacks: perhaps the node list is what is wrong).
fn report_skipped(skipped: &Skipped) {
    if skipped.total == 0 {
        return;
    }
    let unfit = [alibaba::SKIPPED_TOO_LARGE, alibaba::SKIPPED_NO_MODEL];
    let (fit, malformed): (Vec<_>, Vec<_>) = skipped.by_reason.iter().partition(|(r, _)| unfit.contains(&r.as_str()));
    let malformed_count: u64 = malformed.iter().map(|(_, n)| **n).sum();
    let mut parts = Vec::new();
    if malformed_count > 0 {
        let by: Vec<String> = malformed.iter().map(|(r, n)| format!("{r} {n}")).collect();
        parts.push(format!("{malformed_count} malformed ({})", by.join(", ")));
    }
    for (reason, n) in fit {
        parts.push(format!("{n} {reason}"));
    }
    eprintln!("skipped {} rows: {}", skipped.total, parts.join("; "));
}
