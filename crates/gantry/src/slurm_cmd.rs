//! Slurm's commands under their own names: `gantry` started as `sbatch`, `squeue` or `scancel`
//! (the links `gantry slurm-install` makes) answers as that command, against the controller
//! $GANTRY_SERVER names (token and CA as for every command: $GANTRY_TOKEN, $GANTRY_DATA).

use crate::jobs_cmd::{self, ServerArg};
use clap::Args;
use gantry_api::JobView;
use gantry_api::slurm::{parse_scancel, parse_squeue, squeue_table};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The names gantry answers to as Slurm.
pub const NAMES: [&str; 4] = ["sbatch", "squeue", "scancel", "srun"];

/// `gantry slurm-install --prefix DIR`.
#[derive(Args)]
pub struct SlurmArgs {
    /// Where the links go (a directory on users' PATH: `~/.local/bin`, `/usr/local/bin`).
    #[arg(long, value_name = "DIR")]
    prefix: PathBuf,
}

/// Link `sbatch`, `squeue` and `scancel` to this binary in the prefix.
pub fn install(args: SlurmArgs) -> anyhow::Result<ExitCode> {
    let me = std::env::current_exe()?;
    std::fs::create_dir_all(&args.prefix)?;
    for name in NAMES {
        let link = args.prefix.join(name);
        if link.symlink_metadata().is_ok() && std::fs::read_link(&link).ok().as_deref() != Some(me.as_path()) {
            anyhow::bail!("{} exists and is not gantry's: left alone (remove it first)", link.display());
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&me, &link)?;
        println!("{} -> {}", link.display(), me.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// If this process was started as a Slurm command, run it and say how it ended.
pub fn as_slurm_command() -> Option<ExitCode> {
    let mut argv = std::env::args();
    let started_as = argv.next()?;
    let name = Path::new(&started_as).file_name()?.to_str()?.to_string();
    let args: Vec<String> = argv.collect();
    if let Some(code) = gantry_agent::steps::run_as(&name, &args) {
        return Some(ExitCode::from(code.clamp(0, 255) as u8));
    }
    NAMES.contains(&name.as_str()).then_some(())?;
    let server = ServerArg::default();
    let result = match name.as_str() {
        "sbatch" => jobs_cmd::sbatch(jobs_cmd::SbatchArgs { args, server }),
        "squeue" => squeue(&args, &server),
        _ => scancel(&args, &server),
    };
    Some(result.unwrap_or_else(|e| {
        eprintln!("{name}: error: {e:#}");
        ExitCode::from(1)
    }))
}

fn squeue(args: &[String], server: &ServerArg) -> anyhow::Result<ExitCode> {
    let me = std::env::var("USER").unwrap_or_default();
    let q = parse_squeue(args, &me)?;
    let (jobs, _): (Vec<JobView>, _) = server.fetch("GET", "/v1/jobs")?;
    print!("{}", squeue_table(&jobs, &q, gantry_server::now_s()));
    Ok(ExitCode::SUCCESS)
}

/// Cancel each job; like Slurm's, quiet when all went, an error line for each that did not.
fn scancel(args: &[String], server: &ServerArg) -> anyhow::Result<ExitCode> {
    let mut code = ExitCode::SUCCESS;
    for id in parse_scancel(args)?.jobs {
        if let Err(e) = server.call("DELETE", &format!("/v1/jobs/{id}"), None) {
            eprintln!("scancel: error: Kill job error on job id {id}: {e:#}");
            code = ExitCode::from(1);
        }
    }
    Ok(code)
}
