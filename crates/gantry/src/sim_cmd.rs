//! `gantry sim`: replay a trace under one or more policies (Protocol A, the FGD paper's).

use anyhow::{Context, bail};
use clap::Args;
use gantry_engine::Policy;
use gantry_sim::alibaba::{self, Mode, Skipped};
use gantry_sim::protocol_a::{self, ProtocolA};
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # the FGD protocol on the Alibaba trace, FGD and best-fit, seed 42
  gantry sim --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv --policy fgd,best-fit --seed 42
  # replay the reference run's exact arrival order and compare decisions
  gantry sim --nodes ... --pods ... --policy fgd --arrivals 06-FGD/decisions.csv --compare 06-FGD/decisions.csv";

#[derive(Args)]
pub struct SimArgs {
    /// Node list (Alibaba trace CSV: sn,cpu_milli,memory_mib,gpu,model).
    #[arg(long, value_name = "FILE")]
    nodes: PathBuf,
    /// Pod list (Alibaba trace CSV).
    #[arg(long, value_name = "FILE")]
    pods: PathBuf,
    /// Policies, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "default", value_parser = parse_policy)]
    policy: Vec<Policy>,
    /// Seed (arrival order and tie-breaks).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Replay this exact arrival order (a `decisions.csv` with a `pod` column) instead of
    /// inflating with the seed.
    #[arg(long, value_name = "FILE")]
    arrivals: Option<PathBuf>,
    /// Compare each decision with this reference `decisions.csv` (pod,node) and report the
    /// agreement rate.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
    /// Skip malformed trace rows (and say how many and why) instead of refusing the file.
    #[arg(long)]
    lenient: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Write every arrival's decision (seq,policy,pod,node,gpu_index) to this CSV file.
    #[arg(long, value_name = "FILE")]
    decisions_out: Option<PathBuf>,
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
    let mode = if args.lenient { Mode::Lenient } else { Mode::Strict };
    let mut skipped = Skipped::default();
    let nodes = alibaba::read_nodes(&args.nodes, mode, &mut skipped)?;
    let pods = alibaba::read_pods(&args.pods, mode, &mut skipped)?;
    let pods = alibaba::check_pods_fit(&nodes, pods, &args.pods, mode, &mut skipped)?;
    if skipped.total > 0 {
        eprintln!("skipped {} malformed rows: {:?}", skipped.total, skipped.by_reason);
    }
    let capacity: u64 = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
    if capacity == 0 {
        bail!("{}: no GPUs in the node list", args.nodes.display());
    }
    let protocol = ProtocolA::default();
    let arrivals = match &args.arrivals {
        Some(path) => {
            let names: Vec<String> = read_decisions(path)?.into_iter().map(|(p, _)| p).collect();
            protocol_a::arrivals_from_names(&pods, &names).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => protocol_a::inflate(&pods, capacity, protocol.tune, args.seed),
    };
    let reference = args.compare.as_ref().map(read_decisions).transpose()?;
    let node_order = match &args.arrivals {
        Some(path) => protocol_a::ranked_node_order(&nodes, &read_node_ranks(path)?),
        None => protocol_a::seeded_node_order(&nodes, args.seed),
    };
    let mut results = Vec::new();
    for policy in &args.policy {
        let started = std::time::Instant::now();
        let result = protocol_a::run(&nodes, &pods, &arrivals, &node_order, *policy, args.seed, &protocol)?;
        let secs = started.elapsed().as_secs_f64();
        let agreement = reference.as_ref().map(|r| {
            let same = result.decisions.iter().zip(r).filter(|(d, (_, node))| d.node == *node).count();
            same as f64 / result.decisions.len().max(1) as f64 * 100.0
        });
        if !args.json {
            println!(
                "{:<14} seed {:<4} arrivals {:>6}  failed {:>5}  alloc@130% {:>6.2}%  final {:>6.2}%{}  ({secs:.2}s)",
                policy.name(),
                args.seed,
                result.arrivals,
                result.failed,
                result.alloc_at(130).unwrap_or(f64::NAN),
                result.final_alloc_pct,
                agreement.map(|a| format!("  agreement {a:.1}%")).unwrap_or_default()
            );
        }
        results.push(result);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    if let Some(path) = &args.decisions_out {
        let mut out = String::from("seq,policy,pod,node,gpu_index\n");
        for r in &results {
            for (seq, d) in r.decisions.iter().enumerate() {
                let gpus: Vec<String> = d.gpus.iter().map(u32::to_string).collect();
                out += &format!(
                    "{seq},{},{},{},{}\n",
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
