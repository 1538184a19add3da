//! `gantry synth`: write a seeded synthetic workload as a native trace (JSON lines).

use anyhow::Context;
use clap::Args;
use gantry_sim::synth::{self, SynthConfig};
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # 2,000 jobs from 4 tenants on the bundled demo fleet, offered at 90 % of its GPU capacity
  gantry synth --jobs 2000 --seed 7 --out trace.jsonl
  gantry sim --trace trace.jsonl --policy default,best-fit --report out/
  # sized for your own fleet, overloaded (jobs queue)
  gantry synth --fleet fleet.toml --jobs 50000 --tenants 8 --load 1.2 --out big.jsonl
  # one tenant submitting four times as much as two others, the fleet oversubscribed
  gantry synth --jobs 3000 --tenants 3 --tenant-mix 4,1,1 --load 2 --out skewed.jsonl
  # a month of arrivals: a million jobs spread over 30 days (the load follows)
  gantry synth --fleet big.toml --jobs 1000000 --days 30 --out month.jsonl
  gantry sim --trace skewed.jsonl --order fifo && gantry sim --trace skewed.jsonl --order fair-share

Default mix (share of jobs): training gangs 2-4 x 8 GPUs 3 %, training 1-8 GPUs 14 %, evaluation
1 GPU 12 %, inference by GPU memory 31 %, MPS services 15 %, time-sliced notebooks 25 %.
Durations are log-normal per kind; utilization is drawn per kind. Format: docs/formats.md.";

#[derive(Args)]
pub struct SynthArgs {
    /// Fleet file (TOML) the jobs must fit and the load is sized for; default: the bundled
    /// demo fleet.
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// Number of jobs.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    jobs: u32,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Number of tenants (team-0, team-1, ...), equal weight; a job's queue is its tenant.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    tenants: u32,
    /// Relative submission rates per tenant, comma-separated (e.g. 4,1,1: team-0 submits four
    /// times as often); tenants not listed weigh 1.
    #[arg(long, value_delimiter = ',', value_name = "W,W,...")]
    tenant_mix: Vec<u32>,
    /// Job mix: `default` (the mix below) or `batch` (1/2/4-GPU jobs of about an hour: many
    /// small jobs, for fairness experiments).
    #[arg(long, default_value = "default", value_parser = parse_mix)]
    mix: synth::Mix,
    /// Offered GPU load as a share of the fleet's capacity (1.0 = exactly full on average).
    #[arg(long, default_value_t = 0.9, conflicts_with = "days")]
    load: f64,
    /// Instead of --load: spread the arrivals over this many days (the offered load then
    /// follows from the mix and the fleet, and is printed).
    #[arg(long, value_name = "DAYS")]
    days: Option<f64>,
    /// Write here instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn parse_mix(s: &str) -> Result<synth::Mix, String> {
    s.parse()
}

pub fn run(args: SynthArgs) -> anyhow::Result<ExitCode> {
    let catalog = gantry_catalog::Catalog::embedded();
    let (fleet_name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
    let config = SynthConfig {
        jobs: args.jobs,
        seed: args.seed,
        tenants: args.tenants,
        tenant_mix: args.tenant_mix,
        load: args.load,
        mix: args.mix,
        days: args.days,
    };
    let (text, load) =
        synth::generate_with_load(&fleet, catalog, &config).map_err(|e| anyhow::anyhow!("{fleet_name}: {e}"))?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {} jobs to {} (offered GPU load {:.2} of the fleet)", args.jobs, path.display(), load);
        }
        None => {
            print!("{text}");
            if args.days.is_some() {
                eprintln!("offered GPU load {load:.2} of the fleet");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
