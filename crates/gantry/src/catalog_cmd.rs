//! `gantry catalog`: what the embedded GPU catalog knows, for people and scripts.

use anyhow::bail;
use clap::Args;
use gantry_catalog::report::{self, ModelReport};
use gantry_catalog::{Catalog, GpuModel};
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  gantry catalog                     # every model, one line each
  gantry catalog H100-SXM5-80GB      # one model with its MIG profiles and legal placements
  gantry catalog h100                # every model a job's `--gpus h100:N` may get
  gantry catalog \"NVIDIA H100 80GB HBM3\" --json";

#[derive(Args)]
pub struct CatalogArgs {
    /// A model id, NVML product name or alias, or the start of one (as `--gpus NAME:N` reads
    /// it); omit to list every model.
    model: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CatalogArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded();
    let models: Vec<&GpuModel> = match &args.model {
        None => catalog.models().iter().collect(),
        // As `--gpus NAME:N` reads it: an exact name, else every model whose name starts so.
        Some(name) => match catalog.resolve(name).as_slice() {
            [] => {
                let close = catalog.suggest(name);
                let hint =
                    if close.is_empty() { String::new() } else { format!("did you mean {}? ", close.join(", ")) };
                bail!("unknown GPU model {name:?}\n  hint: {hint}run `gantry catalog` for the list")
            }
            ids => ids.iter().map(|&id| catalog.model(id)).collect(),
        },
    };
    if args.json {
        let reports: Vec<ModelReport> = models.iter().map(|m| ModelReport::of(m)).collect();
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else if models.len() > 1 {
        print!("{}", report::list_text(&models));
    } else {
        models.into_iter().for_each(|m| print!("{}", report::model_text(m)));
    }
    Ok(ExitCode::SUCCESS)
}
