//! `gantry completions SHELL` and `gantry man DIR`: shell completion and man pages made by
//! clap's own generators from the command definitions, so they cannot drift from `--help`.

use anyhow::Context;
use std::path::Path;
use std::process::ExitCode;

pub fn completions(shell: clap_complete::Shell, mut cli: clap::Command) -> anyhow::Result<ExitCode> {
    clap_complete::generate(shell, &mut cli, "gantry", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `gantry.1` and one page per subcommand (`gantry-submit.1`, ...), written into `dir`.
pub fn man_pages(dir: &Path, cli: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(cli, dir).with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
    eprintln!("wrote man pages into {} (`man -l {}/gantry.1`)", dir.display(), dir.display());
    Ok(ExitCode::SUCCESS)
}
