//! `gantry import`: another system's cluster and history in gantry's formats, on stdout, so a
//! user can replay their own cluster (`gantry sim --trace … --fleet …`) before adopting gantry.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  kubectl get nodes -o json > nodes.json && gantry import kubernetes --nodes nodes.json > fleet.toml
  kubectl get pods -A -o json > pods.json && gantry import kubernetes --pods pods.json > trace.jsonl
  kubectl get clusterqueues,localqueues,resourceflavors,cohorts -A -o yaml > kueue.yaml
  gantry import kueue kueue.yaml > queues.toml
  gantry sim --fleet fleet.toml --trace trace.jsonl --order fair-share --queues queues.toml
  gantry import slurm --conf /etc/slurm/slurm.conf --gres /etc/slurm/gres.conf --map a100=A100-SXM4-80GB --queues-out queues.toml > fleet.toml
  sacct --parsable2 --allocations --starttime now-30days --format=JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,ReqTRES,AllocTRES,NNodes,Priority,QOS,ExitCode > sacct.txt
  gantry import sacct sacct.txt --map a100=A100-SXM4-80GB > trace.jsonl";

#[derive(Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    from: From,
}

#[derive(Subcommand)]
enum From {
    /// A Kubernetes cluster: its nodes (`kubectl get nodes -o json`) as a fleet file, or its
    /// pods (`kubectl get pods -A -o json`) as a native trace. GPU models, counts, MIG layouts
    /// and sharing come from NVIDIA GPU Feature Discovery's labels and the device plugin's
    /// resources; pods keep their GPU, CPU and memory requests, namespace (as queue),
    /// priority and times.
    #[command(after_help = EXAMPLES)]
    Kubernetes(KubernetesArgs),
    /// Kueue's ClusterQueues, Cohorts, LocalQueues and ResourceFlavors (YAML) as a queue file:
    /// cohorts and cluster queues as the tree, each LocalQueue's namespace a leaf, GPU quotas
    /// (nominal, borrowing, lending) by the flavor's GPU model; what does not map is listed.
    #[command(after_help = EXAMPLES)]
    Kueue(KueueArgs),
    /// A Slurm cluster's slurm.conf as a fleet file (NodeName lines, hostlists, Gres with GPU
    /// types, MIG types by profile, Features and Weight as labels), its partitions as queues.
    #[command(after_help = EXAMPLES)]
    Slurm(SlurmArgs),
    /// Slurm's accounting history (`sacct --parsable2 --allocations --format=…`, the fields in
    /// docs/formats.md) as a native trace; rows that cannot be replayed are counted by reason.
    #[command(after_help = EXAMPLES)]
    Sacct(SacctArgs),
}

#[derive(Args)]
struct SlurmArgs {
    /// The cluster's slurm.conf (or `scontrol show node` or `sinfo -N -o "%N %c %m %G %f"` output).
    #[arg(long, value_name = "FILE")]
    conf: PathBuf,
    /// The cluster's gres.conf: types the GPUs slurm.conf's Gres= leaves untyped.
    #[arg(long, value_name = "FILE")]
    gres: Option<PathBuf>,
    /// A gres type as a catalog model (`--map a100=A100-SXM4-80GB`; `gpu=MODEL` for untyped
    /// Gres=gpu:N), repeatable.
    #[arg(long = "map", value_name = "TYPE=MODEL")]
    maps: Vec<String>,
    /// Also write the partitions (node sets with their limits, each with a queue) as a queue file here.
    #[arg(long, value_name = "FILE")]
    queues_out: Option<PathBuf>,
    /// Skip and count lines that are not valid Slurm config instead of refusing the file.
    #[arg(long)]
    lenient: bool,
}

#[derive(Args)]
struct SacctArgs {
    /// sacct's output (--parsable2, with a header line).
    file: PathBuf,
    /// A gres type as a catalog model, repeatable.
    #[arg(long = "map", value_name = "TYPE=MODEL")]
    maps: Vec<String>,
    /// What a job's queue is: its partition (the queues `gantry import slurm` writes) or its
    /// account (Slurm's fair-share tree).
    #[arg(long, value_parser = ["partition", "account"], default_value = "partition")]
    queue_from: String,
    /// Skip and count rows that are not valid accounting (a field that does not parse, a job
    /// that ends before it starts, a GPU type without a model) instead of refusing the file.
    #[arg(long)]
    lenient: bool,
}

#[derive(Args)]
struct KueueArgs {
    /// YAML files (several documents each, or `kubectl … -o yaml` Lists).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// A ResourceFlavor without an nvidia.com/gpu.product node label, as a catalog model:
    /// `--map a100=A100-SXM4-80GB` (repeatable).
    #[arg(long = "map", value_name = "FLAVOR=MODEL")]
    maps: Vec<String>,
}

#[derive(Args)]
struct KubernetesArgs {
    /// `kubectl get nodes -o json` output: written as a fleet file (TOML).
    #[arg(long, value_name = "FILE", conflicts_with = "pods", required_unless_present = "pods")]
    nodes: Option<PathBuf>,
    /// `kubectl get pods -A -o json` output: written as a native trace (JSON lines).
    #[arg(long, value_name = "FILE")]
    pods: Option<PathBuf>,
    /// A GPU Feature Discovery product the catalog does not know by that name, as a catalog
    /// model: `--map NVIDIA-Custom-X=H100-SXM5-80GB` (repeatable).
    #[arg(long = "map", value_name = "PRODUCT=MODEL", requires = "nodes")]
    maps: Vec<String>,
    /// Keep pods that ask for no GPU, as CPU-only jobs.
    #[arg(long, requires = "pods")]
    cpu_pods: bool,
    /// What one shared replica (`nvidia.com/gpu.shared`) stands for, in milli-GPU (1..=1000).
    #[arg(long, value_name = "MILLI", default_value_t = 250, requires = "pods",
        value_parser = clap::value_parser!(u32).range(1..=1000))]
    shared_milli: u32,
    /// Skip and count pods whose record is not valid (a timestamp that does not parse, times
    /// out of order) instead of refusing the file.
    #[arg(long, requires = "pods")]
    lenient: bool,
}

/// Largest input read: a large cluster's pod list is tens of MiB.
const INPUT_BYTES_MAX: u64 = 512 << 20;

pub(crate) fn read(path: &std::path::Path) -> anyhow::Result<String> {
    let size = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?.len();
    if size > INPUT_BYTES_MAX {
        bail!("{}: {size} bytes, more than the {INPUT_BYTES_MAX} read", path.display());
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// `--map NAME=MODEL` pairs, each model checked against the catalog.
pub(crate) fn maps(maps: &[String], catalog: &gantry_catalog::Catalog) -> anyhow::Result<BTreeMap<String, String>> {
    gantry_spec::model_map(maps, catalog).map_err(|e| anyhow::anyhow!("{e}"))
}

pub fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    match args.from {
        From::Kubernetes(k) => kubernetes(&k)?,
        From::Slurm(a) => slurm(&a)?,
        From::Sacct(a) => sacct(&a)?,
        From::Kueue(q) => kueue(&q)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// slurm.conf (and gres.conf) as a fleet file on stdout, the partitions as a queue file.
fn slurm(a: &SlurmArgs) -> anyhow::Result<()> {
    let catalog = gantry_catalog::Catalog::embedded();
    let map = maps(&a.maps, catalog)?;
    let source =
        gantry_spec::SlurmSource { name: a.conf.display().to_string(), catalog, map: &map, lenient: a.lenient };
    let gres = a.gres.as_ref().map(|p| read(p).map(|text| (p.display().to_string(), text))).transpose()?;
    let gres = gres.as_ref().map(|(n, t)| (n.as_str(), t.as_str()));
    let imported =
        gantry_spec::import_slurm_conf(&read(&a.conf)?, gres, &source).map_err(|e| anyhow::anyhow!("{e}"))?;
    // The queue file first: a failure to write it leaves stdout empty, not half a result.
    if let Some(path) = &a.queues_out {
        std::fs::write(path, &imported.queues).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote the partitions (each with a queue of its name) to {}", path.display());
    }
    print!("{}", imported.fleet);
    eprintln!("imported {} node(s) from {}", imported.nodes, a.conf.display());
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    if !imported.skipped.is_empty() {
        eprintln!("skipped {} line(s) (--lenient):", imported.skipped.len());
        for line in &imported.skipped {
            eprintln!("  {line}");
        }
    }
    Ok(())
}

/// sacct's accounting as a native trace on stdout.
fn sacct(a: &SacctArgs) -> anyhow::Result<()> {
    let catalog = gantry_catalog::Catalog::embedded();
    let from =
        if a.queue_from == "account" { gantry_spec::QueueFrom::Account } else { gantry_spec::QueueFrom::Partition };
    let map = maps(&a.maps, catalog)?;
    let source =
        gantry_spec::SlurmSource { name: a.file.display().to_string(), catalog, map: &map, lenient: a.lenient };
    let imported = gantry_spec::import_sacct(&read(&a.file)?, &source, from).map_err(|e| anyhow::anyhow!("{e}"))?;
    print!("{}", imported.jsonl);
    print_skipped(&format!("imported {} job(s) from {}", imported.jobs, a.file.display()), "row(s)", &imported.skipped);
    Ok(())
}

/// What was left out, by reason, after the `imported` line.
fn print_skipped(imported: &str, what: &str, skipped: &BTreeMap<String, u64>) {
    let n: u64 = skipped.values().sum();
    eprintln!("{imported}; left out {n} {what}");
    for (why, n) in skipped {
        eprintln!("  {n} × {why}");
    }
}

/// Kueue's objects as a queue file on stdout.
fn kueue(q: &KueueArgs) -> anyhow::Result<()> {
    let catalog = gantry_catalog::Catalog::embedded();
    let mut texts = Vec::new();
    for path in &q.files {
        texts.push((path.display().to_string(), read(path)?));
    }
    let files: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let imported =
        gantry_spec::import_kueue(&files, catalog, &maps(&q.maps, catalog)?).map_err(|e| anyhow::anyhow!("{e}"))?;
    print!("{}", imported.toml);
    eprintln!("imported {} queue(s)", imported.queues);
    for line in &imported.unmapped {
        eprintln!("not mapped: {line}");
    }
    Ok(())
}

/// Kubernetes nodes as a fleet file, or pods as a native trace, on stdout.
fn kubernetes(k: &KubernetesArgs) -> anyhow::Result<()> {
    let catalog = gantry_catalog::Catalog::embedded();
    if let Some(path) = &k.nodes {
        let map = maps(&k.maps, catalog)?;
        let imported = gantry_spec::import_kubernetes_nodes(&read(path)?, catalog, &map)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        print!("{}", imported.toml);
        eprintln!("imported {} node(s) from {}", imported.nodes, path.display());
        for note in &imported.notes {
            eprintln!("note: {note}");
        }
    } else if let Some(path) = &k.pods {
        let options =
            gantry_spec::PodOptions { cpu_pods: k.cpu_pods, shared_milli: k.shared_milli, lenient: k.lenient };
        let imported = gantry_spec::import_kubernetes_pods(&read(path)?, catalog, &options)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        print!("{}", imported.jsonl);
        print_skipped(
            &format!("imported {} job(s) from {}", imported.jobs, path.display()),
            "pod(s)",
            &imported.skipped,
        );
    }
    Ok(())
}
