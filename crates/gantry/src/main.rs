//! `gantry`: the one binary; each subcommand parses its arguments here and calls a library.
//! Planning offline: `place` (a dry run of placement), `catalog` (GPU models and MIG
//! geometry), `validate`, `advise`, `plan`, `sim` (replay a trace), `synth`, `import`
//! (Kubernetes and Slurm history), `whatif`. The live system: `serve` (the controller),
//! `agent` (a node), `discover`, `cert`, `replay`, `checkpoint`; and against a controller:
//! `submit`, `sbatch`, `queue`, `show`, `why`, `cancel`, `hold`, `release`, `logs`, `nodes`,
//! `drain`, `resume`, `node`, `mig`, `usage`, `token`; `slurm-install`, and started as `sbatch`,
//! `srun`, `salloc`, `squeue`, `scancel`, `sacct`, `sinfo` or `scontrol`, Slurm's commands.

mod advise_cmd;
mod agent_cmd;
mod catalog_cmd;
mod cert_cmd;
mod confine_args;
mod import_cmd;
mod jobs_cmd;
mod logs_cmd;
mod manners;
mod mig_cmd;
mod place_cmd;
mod plan_cmd;
mod replay_cmd;

mod serve_cmd;
mod sim_cmd;
mod slurm_cmd;
mod synth_cmd;
mod usage_cmd;
mod whatif_cmd;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "gantry", version, about = "GPU fleet scheduler: share GPUs well, place gangs on the right topology", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Place a workload on a fleet, in order, and show where each task goes or why it cannot.
    #[command(after_help = place_cmd::EXAMPLES)]
    Place(place_cmd::PlaceArgs),
    /// Which unit a job should ask for — whole GPUs, a MIG profile, an MPS share or a
    /// time-slice — from its shape, with the reason and the workload line.
    #[command(after_help = advise_cmd::EXAMPLES)]
    Advise(advise_cmd::AdviseArgs),
    /// Propose each GPU's mode and MIG layout for a workload mix or a trace, check it with the
    /// engine, and export it for Kubernetes (mig-parted, device-plugin sharing, node labels);
    /// or, with --evaluate, compare online MIG planning with static layouts in the simulator.
    #[command(after_help = plan_cmd::EXAMPLES)]
    Plan(plan_cmd::PlanArgs),
    /// List GPU models and their MIG profiles with legal placements.
    #[command(after_help = catalog_cmd::EXAMPLES)]
    Catalog(catalog_cmd::CatalogArgs),
    /// Replay a trace under scoring policies (the FGD paper's protocol, or a time replay with a
    /// queue) and measure allocation.
    #[command(after_help = sim_cmd::EXAMPLES)]
    Sim(Box<sim_cmd::SimArgs>),
    /// Write a seeded synthetic multi-tenant workload as a native trace (JSON lines) for
    /// `gantry sim --trace`: training gangs, training, evaluation, inference, MPS services and
    /// notebooks, every job able to run on the fleet, arrivals paced to a target load.
    #[command(after_help = synth_cmd::EXAMPLES)]
    Synth(synth_cmd::SynthArgs),
    /// Run the controller (with `--local`, also the agent for this machine): REST API, store,
    /// scheduling loop; tasks run as real processes.
    #[command(after_help = serve_cmd::EXAMPLES)]
    Serve(Box<serve_cmd::ServeArgs>),
    /// Run the node agent for this machine: register with a controller (`gantry serve`
    /// without --local) and run the tasks it places here.
    #[command(after_help = agent_cmd::EXAMPLES)]
    Agent(agent_cmd::AgentArgs),
    /// Submit a workload file's jobs to a running controller.
    #[command(after_help = jobs_cmd::EXAMPLES)]
    Submit(jobs_cmd::SubmitArgs),
    /// Submit a batch script with `#SBATCH` lines, as Slurm's sbatch does.
    #[command(after_help = "Examples:\n  gantry sbatch train.sh\n  gantry sbatch train.sh --wait")]
    Sbatch(jobs_cmd::SbatchArgs),
    /// List jobs (pending and running by default) with why each waits.
    #[command(after_help = jobs_cmd::EXAMPLES)]
    Queue(jobs_cmd::QueueArgs),
    /// One job: state, where its tasks run, why it waits.
    Show(jobs_cmd::JobArgs),
    /// Why a job is not running yet, and when it is expected to start.
    Why(jobs_cmd::JobArgs),
    /// Cancel jobs (a running one is signalled, then killed after its grace period).
    Cancel(jobs_cmd::CancelArgs),
    /// Hold a waiting job: it leaves its queue and never starts until released.
    Hold(jobs_cmd::JobArgs),
    /// Release a held job: it waits again, from now.
    Release(jobs_cmd::JobArgs),
    /// A job's task output (stdout and stderr) from whichever node runs it; -f follows it
    /// until the job ends.
    #[command(after_help = logs_cmd::EXAMPLES)]
    Logs(logs_cmd::LogsArgs),
    /// Show or change this machine's MIG layouts through NVML (idle GPUs in MIG mode only;
    /// all or nothing).
    #[command(after_help = mig_cmd::EXAMPLES)]
    Mig(mig_cmd::MigArgs),
    /// What GPUs NVML finds on this machine (exit 1, with why, when it finds none).
    Discover {
        /// Print the node as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every node: readiness, its GPUs' mode, allocation next to utilization, and the jobs on them.
    Nodes(jobs_cmd::NodesArgs),
    /// Drain a node (admin): nothing new starts there; what runs keeps running.
    Drain(jobs_cmd::NodeArgs),
    /// Resume a drained node (admin).
    Resume(jobs_cmd::NodeArgs),
    /// Act on a node (admin): `gantry node lost NAME` when its machine is known dead.
    Node(jobs_cmd::NodeCommandArgs),
    /// Chargeback: GPU-hours allocated and used, waste, and cost, by user, queue, model or job.
    #[command(after_help = usage_cmd::EXAMPLES)]
    Usage(usage_cmd::UsageArgs),
    /// Manage API tokens (admin): create, list, revoke.
    Token(jobs_cmd::TokenArgs),
    /// Save which controller the CLI reaches (URL, CA, token) in the client profile
    /// ($XDG_CONFIG_HOME/gantry/client.toml), after checking it answers the token
    Login(jobs_cmd::LoginArgs),
    /// Link sbatch, srun, salloc, squeue, scancel, sacct, sinfo and scontrol to gantry in a directory:
    /// started by those names, gantry answers as Slurm's commands do (`gantry slurm-install
    /// --prefix ~/.local/bin`).
    #[command(name = "slurm-install")]
    SlurmInstall(slurm_cmd::SlurmArgs),
    /// The controller's CA: its fingerprint, and client certificates for agents (mutual TLS).
    #[command(after_help = cert_cmd::EXAMPLES)]
    Cert(cert_cmd::CertArgs),
    /// Re-run the controller's command log through a fresh state machine and check that every
    /// decision (starts and placements, stops, endings, pending reasons) comes out the same.
    #[command(after_help = replay_cmd::EXAMPLES)]
    Replay(replay_cmd::ReplayArgs),
    /// Checkpoint the controller now (admin): the command log before the newest checkpoint at
    /// or before the retention window's start ([log] keep, 7 days by default) is deleted.
    Checkpoint(replay_cmd::CheckpointArgs),
    /// Another system's cluster and history in gantry's formats: `gantry import kubernetes
    /// --nodes nodes.json > fleet.toml`, `--pods pods.json > trace.jsonl`.
    #[command(after_help = import_cmd::EXAMPLES)]
    Import(import_cmd::ImportArgs),
    /// Your cluster's history beside what gantry would have done with it: waits per queue, GPU
    /// allocation and use as it happened, under gantry's policy with fair share and backfill,
    /// and on a planned MIG layout; and the fewest GPUs that would have served it no worse.
    #[command(after_help = whatif_cmd::EXAMPLES)]
    Whatif(whatif_cmd::WhatifArgs),
    /// Check a fleet file and/or a workload file; with both, name each job the fleet could never
    /// run (each alone on the empty fleet, as the controller checks a submission) and exit 1.
    #[command(
        after_help = "Examples:\n  gantry validate --fleet fleet.toml\n  gantry validate --workload jobs.toml\n  gantry validate --fleet fleet.toml --workload jobs.toml   # cross-check"
    )]
    Validate(place_cmd::ValidateArgs),
    /// Print a shell completion script: `gantry completions bash > /etc/bash_completion.d/gantry`.
    Completions { shell: clap_complete::Shell },
    /// Write a man page for gantry and each subcommand into DIR (`gantry man /usr/local/share/man/man1`).
    Man { dir: std::path::PathBuf },
}

fn main() -> ExitCode {
    gantry_api::exit::quiet_on_broken_pipe();
    if let Some(code) = slurm_cmd::as_slurm_command() {
        return code;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Place(args) => place_cmd::run(args),
        Command::Catalog(args) => catalog_cmd::run(args),
        Command::Advise(args) => advise_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(args),
        Command::Validate(args) => place_cmd::validate(args),
        Command::Sim(args) => sim_cmd::run(*args),
        Command::Synth(args) => synth_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(*args),
        Command::Agent(args) => agent_cmd::run(args),
        Command::Submit(args) => jobs_cmd::submit(args),
        Command::Sbatch(args) => jobs_cmd::sbatch(args),
        Command::Queue(args) => jobs_cmd::queue(args),
        Command::Show(args) => jobs_cmd::show(args),
        Command::Why(args) => jobs_cmd::why(args),
        Command::Cancel(args) => jobs_cmd::cancel(args),
        Command::Logs(args) => logs_cmd::logs(args),
        Command::Hold(args) => jobs_cmd::hold(args, true),
        Command::Release(args) => jobs_cmd::hold(args, false),
        Command::Token(args) => jobs_cmd::token(args),
        Command::Login(args) => jobs_cmd::login(args),
        Command::SlurmInstall(args) => slurm_cmd::install(args),
        Command::Cert(args) => cert_cmd::run(args),
        Command::Usage(args) => usage_cmd::run(args),
        Command::Nodes(args) => jobs_cmd::nodes(args),
        Command::Mig(args) => mig_cmd::run(args),
        Command::Replay(args) => replay_cmd::run(args),
        Command::Checkpoint(args) => replay_cmd::checkpoint(args),
        Command::Import(args) => import_cmd::run(args),
        Command::Whatif(args) => whatif_cmd::run(args),
        Command::Discover { json } => serve_cmd::discover(json),
        Command::Drain(args) => jobs_cmd::drain(args, true),
        Command::Resume(args) => jobs_cmd::drain(args, false),
        Command::Node(args) => jobs_cmd::node(args),
        Command::Completions { shell } => manners::completions(shell, Cli::command()),
        Command::Man { dir } => manners::man_pages(&dir, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(gantry_api::exit::code(err.chain()))
        }
    }
}
