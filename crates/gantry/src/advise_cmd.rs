//! `gantry advise`: which unit to ask for — whole GPUs, a MIG profile, an MPS share or a
//! time-slice — for a job's shape (the engine's advisor, `gantry_engine::advise`), printed
//! with the reason and the workload line to paste.

use clap::Args;
use gantry_engine::advise::{Purpose, Shape, advise, model};
use gantry_types::Isolation;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry advise --purpose inference --size 0.25 --memory 18GiB --latency-sensitive
  gantry advise --purpose development --size 0.125
  gantry advise --purpose inference --size 0.2 --memory 5GiB --trusted --model A100-SXM4-80GB
  gantry advise --purpose training --size 8 --json";

#[derive(Args)]
pub struct AdviseArgs {
    /// What the job is for: training, inference, development (notebooks) or batch.
    #[arg(long, value_parser = ["training", "inference", "development", "batch"])]
    purpose: String,
    /// Compute it needs, in cards: 0.25 is a quarter of one, 4 is four.
    #[arg(long, value_name = "CARDS")]
    size: f64,
    /// GPU memory per task (e.g. 18GiB). Default: the size's share of the card's memory.
    #[arg(long)]
    memory: Option<String>,
    /// Its load comes in bursts (it is never given a hard MIG slice).
    #[arg(long)]
    bursty: bool,
    /// Isolation it needs: hard (whole GPU or MIG), soft (also MPS), none (also time-slice).
    #[arg(long, default_value = "none", value_parser = ["hard", "soft", "none"])]
    isolation: String,
    /// Latency matters (production serving).
    #[arg(long)]
    latency_sensitive: bool,
    /// Its code may share an MPS server with others (MPS has no fault isolation).
    #[arg(long)]
    trusted: bool,
    /// GPU model (catalog id, alias or NVML name). Default: H100-SXM5-80GB.
    #[arg(long)]
    model: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: AdviseArgs) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    let gpu = model(catalog, args.model.as_deref()).map_err(|e| anyhow::anyhow!(e))?;
    let memory = match &args.memory {
        Some(text) => Some(
            gantry_spec::parse_memory("--memory", &gantry_spec::Quantity::Text(text.clone()))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .0,
        ),
        None => None,
    };
    let shape = Shape {
        purpose: match args.purpose.as_str() {
            "training" => Purpose::Training,
            "inference" => Purpose::Inference,
            "development" => Purpose::Development,
            _ => Purpose::Batch,
        },
        cards: args.size,
        memory,
        bursty: args.bursty,
        isolation: match args.isolation.as_str() {
            "hard" => Isolation::Hard,
            "soft" => Isolation::Soft,
            _ => Isolation::None,
        },
        latency_sensitive: args.latency_sensitive,
        trusted: args.trusted,
    };
    let advice = advise(&shape, gpu).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        let not: Vec<serde_json::Value> =
            advice.not.iter().map(|(unit, why)| serde_json::json!({ "unit": unit, "why": why })).collect();
        let out = serde_json::json!({
            "model": gpu.id,
            "unit": advice.unit.name(),
            "spec": advice.unit.spec(),
            "why": advice.why,
            "not": not,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} on {}: {}", advice.unit.name(), gpu.id, advice.why);
    println!("\n  {}\n", advice.unit.spec().replace('\n', "\n  "));
    for (unit, why) in &advice.not {
        println!("  not {unit}: {why}");
    }
    Ok(ExitCode::SUCCESS)
}
