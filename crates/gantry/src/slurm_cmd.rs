//! Slurm's commands under their own names: `gantry` started as `sbatch`, `srun`, `salloc`,
//! `squeue`, `scancel`, `sacct`, `sinfo` or `scontrol` (the links `gantry slurm-install` makes) answers
//! as that command, against the controller $GANTRY_SERVER names (token and CA as for every
//! command: $GANTRY_TOKEN, $GANTRY_DATA). The commands themselves live in gantry-api's
//! `slurm` (`srun` in a job in gantry-agent's `steps`; `srun` outside one and `salloc` in `slurm::attached`).

use crate::jobs_cmd::{self, ServerArg};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The names gantry answers to as Slurm.
pub const NAMES: [&str; 8] = ["sbatch", "srun", "salloc", "squeue", "scancel", "sacct", "sinfo", "scontrol"];

/// `gantry slurm-install --prefix DIR`.
#[derive(Args)]
pub struct SlurmArgs {
    /// Where the links go (a directory on users' PATH: `~/.local/bin`, `/usr/local/bin`).
    #[arg(long, value_name = "DIR")]
    prefix: PathBuf,
}

/// Link Slurm's command names to this binary in the prefix.
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
    let conn = ServerArg::default().connection();
    let code = gantry_api::slurm::attached::run_if_attached(&name, &args, &conn);
    if let Some(code) = code.or_else(|| gantry_agent::steps::run_as(&name, &args)) {
        return Some(ExitCode::from(code.clamp(0, 255) as u8));
    }
    let me = gantry_api::slurm::invoking_user();
    if let Some(reply) = gantry_api::slurm::run(&name, &args, &conn, &me, gantry_server::now_s()) {
        print!("{}", reply.out);
        eprint!("{}", reply.err);
        return Some(ExitCode::from(reply.code));
    }
    (name == "sbatch").then_some(())?;
    let result = jobs_cmd::sbatch(jobs_cmd::SbatchArgs { args, server: ServerArg::default() });
    Some(result.unwrap_or_else(|e| {
        eprintln!("{name}: error: {e:#}");
        ExitCode::from(1)
    }))
}
