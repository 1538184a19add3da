//! `gantry serve`: the controller — with `--local`, also one node agent per node of the fleet,
//! in-process (this machine's GPUs through NVML, else the bundled demo fleet); without it, the nodes of
//! `--fleet` are served by remote agents (`gantry agent`, see agent_cmd.rs).

use anyhow::{Context, bail};
use clap::Args;
use gantry_server::banner::{self, Banner};
use gantry_server::control::{Agents, NODE_LOST_AFTER_DEFAULT_S};
use gantry_server::error::ServeError;
use gantry_server::local_agents::LocalConfinement;
use gantry_server::settings::file::ConfigFile;
use gantry_server::settings::tls::TlsFlags;
use gantry_server::supervise::{self, Ended, Notice};
use gantry_server::{ServeConfig, StoreChoice, settings};
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # controller + local agent on the demo fleet, and the bundled demo jobs submitted
  gantry serve --local --demo
  # controller + local agent on this machine's GPUs; data in ~/.local/share/gantry
  gantry serve --local
  # then, from another shell
  gantry submit examples/demo-workload.toml
  gantry queue
  gantry why 3
  # controller only (as root: tasks run as their users): each node runs `gantry agent`
  gantry serve --fleet fleet.toml --listen 0.0.0.0:8177 --tls-name controller.example
  gantry token create gpu01-agent --role agent --node gpu01   # one agent token per node
  gantry cert agent gpu01 --fleet fleet.toml --out certs/     # optional: its client certificate
  # plain HTTP on loopback (tests, or behind a TLS proxy)
  gantry serve --local --insecure-http";

/// Where the controller listens by default (the CLI's default server too).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8177";

#[derive(Args)]
pub struct ServeArgs {
    /// Run the node agents in this process, on this machine (one per node of the fleet: this
    /// machine's GPUs, or a simulated fleet). Without it, the fleet file's nodes are
    /// served by remote agents (`gantry agent`), each getting work while it heartbeats.
    #[arg(long)]
    local: bool,
    /// With --local: run the bundled demo fleet (simulated GPUs, unless --fleet) and submit
    /// the bundled demo workload (examples/demo-workload.toml) once the controller is up, if
    /// its store has no jobs yet; the jobs' starts and ends show in the log. Without a
    /// `[billing]` in --config, example prices ($/GPU-hour: H100 4.00, A100 2.50, L4 0.80).
    #[arg(long, requires = "local")]
    demo: bool,
    /// With --demo: seconds each step of a demo job sleeps (default 10: the jobs run for one
    /// to five minutes, long enough to see queueing, reasons and the dashboard move; a small
    /// value runs the whole demo in seconds).
    #[arg(long, value_name = "SECONDS", requires = "demo", value_parser = gantry_server::demo::parse_step)]
    demo_step: Option<f64>,
    /// With remote agents: a node whose agent is silent this long gets no new work (what
    /// runs there keeps its place until the agent is back). Default 30.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    agent_timeout: Option<u64>,
    /// With remote agents: a node whose agent is silent this long is lost — its jobs end
    /// (requeued unless they say `requeue = false`), their GPUs are freed, and tasks it still
    /// runs are killed when its agent comes back. Longer than --agent-timeout. Default 300.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    node_lost_after: Option<u64>,
    /// Data directory: the store (gantry.db) and task logs. Default: $GANTRY_DATA, else
    /// ~/.local/share/gantry.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Address to listen on (HTTPS; default 127.0.0.1:8177).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Keep the state in PostgreSQL (`postgres://user:password@host:port/database`) instead
    /// of SQLite in the data directory: several controllers can then share one store, one
    /// leading at a time (the others are --standby). TLS as libpq: add
    /// `?sslmode=verify-full&sslrootcert=CA.pem` to check the database's certificate and name
    /// (the default, prefer, encrypts when offered but checks nothing). Default:
    /// $GANTRY_STORE, else SQLite.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// The URL clients reach this controller by, which standbys tell clients while it leads
    /// (default: http(s)://LISTEN-ADDRESS, this machine's host name for 0.0.0.0). Set it when
    /// clients come through another name or a proxy.
    #[arg(long, value_name = "URL", value_parser = gantry_server::settings::advertise_url)]
    advertise: Option<String>,
    /// With a PostgreSQL --store: wait to lead instead of refusing to start while another
    /// controller leads; take over when the leader's process dies or its lease (10 s) runs out.
    #[arg(long)]
    standby: bool,
    /// Serve plain HTTP instead of HTTPS: tokens and jobs travel in the clear. For loopback
    /// tests, or behind a TLS proxy on a network you trust.
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    insecure_http: bool,
    /// The server's certificate (PEM chain) instead of one from the data directory's CA.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA whose client certificates agents may present (default with the data
    /// directory's CA: that CA; with --tls-cert: none).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Another name or address clients reach this controller by, for the certificate made
    /// from the data directory's CA (repeatable; localhost, loopback and this machine's name
    /// are always in it).
    #[arg(long = "tls-name", value_name = "NAME")]
    tls_names: Vec<String>,
    /// Agents must present a client certificate for their node (`gantry cert agent NODE`):
    /// optional (checked when given) or required.
    #[arg(long, value_parser = ["optional", "required"])]
    agent_certs: Option<String>,
    /// Fleet file (TOML, docs/formats.md). Default: this machine's GPUs when NVML finds them,
    /// else the bundled demo fleet (simulated GPUs; tasks still run as real processes).
    #[arg(long, value_name = "FILE")]
    fleet: Option<PathBuf>,
    /// Queue file (TOML, docs/formats.md): fair share between its queues, quotas, per-user
    /// limits. Without it: one FIFO queue, priority ignored.
    #[arg(long, value_name = "FILE")]
    queues: Option<PathBuf>,
    /// What may start past a blocked job: off, greedy, or reserve (the blocked job gets a
    /// reserved start that later jobs may not delay; under greedy, only once it has waited the
    /// queue file's `greedy_reserve_after`).
    #[arg(long, value_parser = ["off", "greedy", "reserve"])]
    backfill: Option<String>,
    /// With --queues: let waiting jobs stop preemptible work they have a right to (lower
    /// priority, a borrower of their queue's guarantee, or, past the starvation bound, their
    /// own priority); victims are signalled, killed after their grace period, and wait again.
    #[arg(long)]
    preempt: bool,
    /// Cancel a job whose dependency can never be met (Slurm's `kill_invalid_depend`);
    /// by default it stays pending, saying so, until cancelled.
    #[arg(long)]
    kill_invalid_depend: bool,
    /// Log format on stderr: text, or json (one object per line). Level from $RUST_LOG
    /// (default info).
    #[arg(long, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Configuration file (TOML) with any of: listen, insecure_http, data, fleet, queues,
    /// backfill, preempt, log_format, and the tables [billing], [idle], [admission], [tls],
    /// [users], [reconfigure] (docs/formats.md); paths relative to the file. Flags given on the
    /// command line win.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Prices and weights: only from the config file's `[billing]`.
    #[arg(skip)]
    billing: Option<gantry_server::meter::Billing>,
    /// Idle detection: only from the config file's `[idle]`.
    #[arg(skip)]
    idle: Option<gantry_server::idle::IdlePolicy>,
    /// Admission limits: only from the config file's `[admission]`.
    #[arg(skip)]
    admission: Option<gantry_server::admission::AdmissionLimits>,
    /// gantry user → Unix account: only from the config file's `[users]`.
    #[arg(skip)]
    users: std::collections::BTreeMap<String, String>,
    /// What the controller does with the online planner's GPU changes: off, advise (the
    /// default: shown by `gantry nodes --plan`), or auto (carried out: GPUs cordoned,
    /// drained, reconfigured by their agents, within the guards of the config file's
    /// `[reconfigure]`). `--demo` uses auto.
    #[arg(long, value_parser = ["off", "advise", "auto"])]
    reconfigure: Option<String>,
    /// The guards: only from the config file's `[reconfigure]`.
    #[arg(skip)]
    reconfigure_policy: Option<gantry_server::control::reconfig::ReconfigurePolicy>,
    /// Checkpoints and log retention: only from the config file's `[log]`.
    #[arg(skip)]
    log: Option<gantry_server::retention::LogRetention>,
    #[command(flatten)]
    confine: crate::confine_args::ConfineArgs,
}

/// Fill what the command line left out from the configuration file.
fn merge(mut args: ServeArgs) -> anyhow::Result<ServeArgs> {
    let Some(path) = args.config.clone() else { return Ok(args) };
    let file = ConfigFile::read(&path)?;
    args.listen = args.listen.or(file.listen);
    args.store = args.store.or(file.store);
    args.standby |= file.standby.unwrap_or(false);
    args.advertise = args.advertise.or(file.advertise);
    args.insecure_http |= file.insecure_http.unwrap_or(false);
    if let Some(tls) = file.tls {
        args.tls_cert = args.tls_cert.or(tls.cert);
        args.tls_key = args.tls_key.or(tls.key);
        args.tls_client_ca = args.tls_client_ca.or(tls.client_ca);
        args.tls_names.extend(tls.names);
        args.agent_certs = args.agent_certs.or(tls.agent_certs);
    }
    args.data = args.data.or(file.data);
    args.fleet = args.fleet.or(file.fleet);
    args.queues = args.queues.or(file.queues);
    args.backfill = args.backfill.or(file.backfill);
    args.preempt |= file.preempt.unwrap_or(false);
    args.kill_invalid_depend |= file.kill_invalid_depend.unwrap_or(false);
    args.log_format = args.log_format.or(file.log_format);
    args.billing = file.billing;
    args.idle = file.idle;
    args.admission = file.admission;
    args.users = file.users.unwrap_or_default();
    args.reconfigure_policy = file.reconfigure;
    args.log = file.log;
    Ok(args)
}

/// Flags that mean nothing together, refused rather than ignored.
fn check_flags(args: &ServeArgs) -> anyhow::Result<()> {
    if args.preempt && args.queues.is_none() {
        bail!("--preempt needs --queues (priority and guarantees come from the queue file)");
    }
    if !args.local && args.fleet.is_none() {
        bail!(
            "without --local, agents on other machines serve the nodes of a fleet file: pass --fleet FILE (or run `gantry serve --local`)"
        );
    }
    let confine = &args.confine;
    let confining = confine.confinement.is_some()
        || confine.memory_unasked.is_some()
        || confine.cpu_unasked.is_some()
        || confine.pids_per_task.is_some();
    if !args.local && confining {
        bail!(
            "--confinement, --memory-unasked, --cpu-unasked and --pids-per-task are for the agents of --local \
             (remote agents take them: gantry agent --help)"
        );
    }
    if args.local && (args.agent_timeout.is_some() || args.node_lost_after.is_some()) {
        bail!("--agent-timeout and --node-lost-after are for remote agents (serve without --local)");
    }
    if args.node_lost_after.unwrap_or(NODE_LOST_AFTER_DEFAULT_S)
        <= args.agent_timeout.unwrap_or(AGENT_TIMEOUT_DEFAULT_S)
    {
        bail!(
            "--node-lost-after must be longer than --agent-timeout (a silent node first gets no new work, then is lost)"
        );
    }
    Ok(())
}

/// Seconds of silence before a remote agent's node gets no new work, unless --agent-timeout.
const AGENT_TIMEOUT_DEFAULT_S: u64 = 30;

/// The fleet: --fleet, the demo's, or this machine's GPUs (the demo fleet when NVML finds
/// none); its name, and whether NVML found it.
fn fleet(args: &ServeArgs) -> anyhow::Result<(String, gantry_types::Fleet, bool)> {
    let catalog = gantry_catalog::Catalog::embedded();
    if args.fleet.is_some() || args.demo {
        // The demo jobs ask for the demo fleet's GPUs (H100s, MIG slices, shares).
        let (name, fleet) = crate::place_cmd::load_fleet(args.fleet.as_deref(), catalog)?;
        return Ok((name, fleet, false));
    }
    match gantry_agent::discover::discover(&gantry_server::hostname(), catalog) {
        Ok(found) => {
            for note in &found.notes {
                eprintln!("note: {note}");
            }
            let name = format!("this machine ({} GPUs found by NVML)", found.node.gpus.len());
            Ok((name, gantry_types::Fleet { nodes: vec![found.node] }, true))
        }
        Err(why) => {
            eprintln!("{why}: using the bundled demo fleet (simulated GPUs; --fleet FILE for your own)");
            let (name, fleet) = crate::place_cmd::load_fleet(None, catalog)?;
            Ok((name, fleet, false))
        }
    }
}

/// The queue file's tree (`None` without --queues), warning of guarantees the fleet cannot hold.
fn queues(args: &ServeArgs, fleet: &gantry_types::Fleet) -> anyhow::Result<Option<gantry_types::QueueTree>> {
    let Some(path) = &args.queues else { return Ok(None) };
    let tree = gantry_sim::experiment::queue_tree(Some(path), std::iter::empty())?;
    for w in gantry_engine::quota::quota_warnings(&tree, &gantry_engine::quota::fleet_capacity(fleet)) {
        eprintln!("warning: {}: {w}", path.display());
    }
    Ok(Some(tree))
}

/// The TLS flags after the configuration file.
fn tls_flags(args: &ServeArgs) -> TlsFlags {
    TlsFlags {
        insecure_http: args.insecure_http,
        cert: args.tls_cert.clone(),
        key: args.tls_key.clone(),
        client_ca: args.tls_client_ca.clone(),
        names: args.tls_names.clone(),
        agent_certs: args.agent_certs.clone(),
    }
}

/// Everything the controller runs with, from the merged flags.
fn serve_config(
    args: &ServeArgs,
    fleet: gantry_types::Fleet,
    discovered: bool,
    confinement: LocalConfinement,
) -> anyhow::Result<(ServeConfig, String)> {
    let order = queues(args, &fleet)?;
    let data_dir = match args.data.clone() {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let listen = args.listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address"));
    let store =
        settings::store_choice(args.store.clone().or_else(|| std::env::var("GANTRY_STORE").ok()), args.standby)?;
    let (tls, chosen) = settings::tls::tls_setup(&tls_flags(args), &data_dir, listen)?;
    let billing = match (&args.billing, args.demo) {
        (Some(billing), _) => billing.clone(),
        (None, true) => settings::demo_billing(),
        (None, false) => Default::default(),
    };
    let agents = match args.local {
        true => Agents::Local,
        false => Agents::Remote {
            heartbeat_timeout_s: args.agent_timeout.unwrap_or(AGENT_TIMEOUT_DEFAULT_S),
            node_lost_after_s: args.node_lost_after.unwrap_or(NODE_LOST_AFTER_DEFAULT_S),
        },
    };
    let config = ServeConfig {
        data_dir,
        listen,
        tls,
        insecure_http: args.insecure_http,
        accounts: gantry_server::users::Accounts::for_this_process(args.users.clone())
            .map_err(|e| anyhow::anyhow!(e))?,
        store,
        fleet,
        tick: std::time::Duration::from_secs(gantry_engine::limits::CYCLE_TICK_S),
        scheduling: settings::scheduling(order, args.backfill.as_deref(), args.preempt, !args.kill_invalid_depend),
        simulate_tasks: None,
        measure_local_gpus: discovered,
        billing,
        idle: args.idle.clone().unwrap_or_default(),
        admission: args.admission.clone().unwrap_or_default(),
        reconfigure: settings::reconfigure_policy(
            args.reconfigure_policy.clone(),
            args.reconfigure.as_deref(),
            args.demo,
        )?,
        log: args.log.clone().unwrap_or_default(),
        advertise: args.advertise.clone(),
        confinement,
        group_commit: true,
        agents,
    };
    Ok((config, banner::tls_note(&chosen)))
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let args = merge(args)?;
    check_flags(&args)?;
    let confinement = LocalConfinement { choice: args.confine.choice(), defaults: args.confine.defaults()? };
    init_logs(args.log_format.as_deref().unwrap_or("text"));
    let open_files = gantry_server::raise_open_files();
    let (fleet_name, fleet, discovered) = fleet(&args)?;
    settings::check_open_files(open_files, if args.local { 0 } else { fleet.nodes.len() });
    let (config, tls_note) = serve_config(&args, fleet, discovered, confinement)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    let banner = Banner { fleet_name, tls_note, local: args.local };
    rt.block_on(serve(config, banner, args))
}

async fn serve(config: ServeConfig, banner: Banner, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let StoreChoice::Postgres { url, standby: true } = &config.store {
        eprintln!("{}", banner::standby_waiting(url));
    }
    let running = gantry_server::start(config.clone()).await.map_err(|e| match e {
        ServeError::Store(gantry_store::StoreError::Led { .. }) => {
            anyhow::anyhow!("{e}\n  hint: start this one with --standby to take over when that controller stops")
        }
        e => anyhow::anyhow!(e),
    })?;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", running.addr);
    let confinement_lines: Vec<String> = running
        .confinement()
        .iter()
        .map(|(confinement, nodes)| gantry_agent::setup::confinement_line(confinement, nodes))
        .collect();
    eprintln!("{}", banner.started(&config, &running, &url, &confinement_lines));
    if args.demo {
        let ca_file = config.tls.as_ref().and_then(|t| t.client_ca.clone()).filter(|_| args.tls_cert.is_none());
        match gantry_server::demo::submit_bundled(&config.data_dir, url, ca_file, args.demo_step).await {
            Ok(lines) => eprintln!("{lines}"),
            Err(e) => eprintln!("demo workload not submitted: {e}"),
        }
    }
    let say = |notice: Notice| eprintln!("{}", banner::notice(scheme, &notice));
    let ended = supervise::serve_until(running, config, stop_signal(), say).await??;
    Ok(match ended {
        Ended::Stopped => ExitCode::SUCCESS,
        Ended::StoreFailed(_) => ExitCode::from(1),
    })
}

/// Structured logs on stderr, filtered by $RUST_LOG (default: info for gantry).
pub fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()));
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `gantry discover`: what NVML finds on this machine.
pub fn discover(json: bool) -> anyhow::Result<ExitCode> {
    match gantry_agent::discover::discover(&gantry_server::hostname(), gantry_catalog::Catalog::embedded()) {
        Ok(found) => {
            println!("{}", if json { found.json()? } else { found.table() });
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => {
            eprintln!("{why}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Wait for Ctrl-C (SIGINT) or SIGTERM (what systemd and `kill` send): either stops gracefully.
pub async fn stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// The data directory the CLI looks in too (`gantry_api::connection::default_data_dir`).
pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    gantry_api::connection::default_data_dir().context("neither --data, $GANTRY_DATA nor $HOME is set")
}
