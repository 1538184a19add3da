//! `gantry serve`: the controller — with `--local`, also one node agent per node of the fleet,
//! in-process (this machine's GPUs through NVML, else the bundled demo fleet); without it, the nodes of
//! `--fleet` are served by remote agents (`gantry agent`, see agent_cmd.rs).

use anyhow::{Context, bail};
use clap::Args;
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
    #[arg(long, value_name = "SECONDS", requires = "demo", value_parser = demo_step)]
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
    #[arg(long, value_name = "URL", value_parser = advertise_url)]
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

/// `gantry serve --config FILE`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<std::net::SocketAddr>,
    store: Option<String>,
    standby: Option<bool>,
    advertise: Option<String>,
    insecure_http: Option<bool>,
    tls: Option<TlsFile>,
    data: Option<PathBuf>,
    fleet: Option<PathBuf>,
    queues: Option<PathBuf>,
    backfill: Option<String>,
    preempt: Option<bool>,
    log_format: Option<String>,
    billing: Option<gantry_server::meter::Billing>,
    idle: Option<gantry_server::idle::IdlePolicy>,
    admission: Option<gantry_server::admission::AdmissionLimits>,
    users: Option<std::collections::BTreeMap<String, String>>,
    reconfigure: Option<gantry_server::control::reconfig::ReconfigurePolicy>,
    log: Option<gantry_server::retention::LogRetention>,
}

/// `[tls]` of the configuration file: what the --tls-* flags say.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    #[serde(default)]
    names: Vec<String>,
    agent_certs: Option<String>,
}

/// Fill what the command line left out from the configuration file.
fn merge(mut args: ServeArgs) -> anyhow::Result<ServeArgs> {
    let Some(path) = args.config.clone() else { return Ok(args) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read config {}", path.display()))?;
    let file: ConfigFile = toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))?;
    let base = path.parent().map(PathBuf::from).unwrap_or_default();
    let relative = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    for (name, value, allowed) in [
        ("backfill", &file.backfill, &["off", "greedy", "reserve"][..]),
        ("log_format", &file.log_format, &["text", "json"][..]),
    ] {
        if let Some(v) = value
            && !allowed.contains(&v.as_str())
        {
            bail!("{}: {name} = {v:?}: use one of {}", path.display(), allowed.join(", "));
        }
    }
    args.listen = args.listen.or(file.listen);
    args.store = args.store.or(file.store);
    args.standby |= file.standby.unwrap_or(false);
    if let Some(url) = file.advertise {
        let url = advertise_url(&url).map_err(|e| anyhow::anyhow!("{}: advertise = {e}", path.display()))?;
        args.advertise = args.advertise.or(Some(url));
    }
    args.insecure_http |= file.insecure_http.unwrap_or(false);
    if let Some(tls) = file.tls {
        if tls.cert.is_some() != tls.key.is_some() {
            bail!("{}: [tls] needs both cert and key, or neither", path.display());
        }
        if let Some(v) = &tls.agent_certs
            && !["optional", "required"].contains(&v.as_str())
        {
            bail!("{}: [tls] agent_certs = {v:?}: use optional or required", path.display());
        }
        args.tls_cert = args.tls_cert.or(tls.cert.map(relative));
        args.tls_key = args.tls_key.or(tls.key.map(relative));
        args.tls_client_ca = args.tls_client_ca.or(tls.client_ca.map(relative));
        args.tls_names.extend(tls.names);
        args.agent_certs = args.agent_certs.or(tls.agent_certs);
    }
    if args.insecure_http && (args.tls_cert.is_some() || args.agent_certs.is_some()) {
        bail!("--insecure-http turns TLS off: it cannot go with TLS certificates or --agent-certs");
    }
    args.data = args.data.or(file.data.map(relative));
    args.fleet = args.fleet.or(file.fleet.map(relative));
    args.queues = args.queues.or(file.queues.map(relative));
    args.backfill = args.backfill.or(file.backfill);
    args.preempt |= file.preempt.unwrap_or(false);
    args.log_format = args.log_format.or(file.log_format);
    if let Some(billing) = &file.billing {
        billing.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    args.billing = file.billing;
    if let Some(idle) = &file.idle {
        idle.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    args.idle = file.idle;
    if let Some(admission) = &file.admission {
        admission.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    args.admission = file.admission;
    args.users = file.users.unwrap_or_default();
    if let Some(policy) = &file.reconfigure {
        policy.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    args.reconfigure_policy = file.reconfigure;
    if let Some(log) = &file.log {
        log.check().map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    args.log = file.log;
    Ok(args)
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
        .with_ansi(std::io::stderr().is_terminal());
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
            if json {
                println!("{}", serde_json::to_string_pretty(&found.node)?);
            } else {
                println!("{}: {} GPU(s)", found.node.name, found.node.gpus.len());
                for g in &found.node.gpus {
                    let mode = match &g.mode {
                        gantry_types::GpuMode::Mig { .. } => format!("  {}", g.mode.text()),
                        _ => String::new(),
                    };
                    println!("  gpu{} {} {}{mode}", g.index, g.model, g.uuid);
                }
                for note in &found.notes {
                    println!("  note: {note}");
                }
            }
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

/// `--store URL` (or $GANTRY_STORE) and `--standby`, checked.
fn store_choice(url: Option<String>, standby: bool) -> anyhow::Result<gantry_server::StoreChoice> {
    match url {
        None if standby => bail!("--standby needs a PostgreSQL --store (SQLite has one controller)"),
        None => Ok(gantry_server::StoreChoice::Sqlite),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            // sslmode and sslrootcert checked now: a typo is an error at start, not a standby
            // that waits for ever.
            let refused = |e: gantry_store::StoreError| match e {
                gantry_store::StoreError::Backend(why) => anyhow::anyhow!("--store: {why}"),
                e => anyhow::anyhow!("--store: {e}"),
            };
            let (tls, _) = gantry_store::pg_tls::TlsOptions::split(&url).map_err(refused)?;
            tls.connector().map_err(refused)?;
            Ok(gantry_server::StoreChoice::Postgres { url, standby })
        }
        Some(url) => bail!(
            "--store {:?}: give a PostgreSQL URL (postgres://user:password@host:port/database); without --store the state is SQLite in the data directory",
            gantry_store::redact_url(&url)
        ),
    }
}

/// `--advertise`: written as clients write `--server` (so a client recognises it among its
/// URLs), and short printable ASCII (a standby sends it in a header).
fn advertise_url(text: &str) -> Result<String, String> {
    let url = gantry_wire::client::base_url(text).map_err(|e| e.to_string())?;
    if url.len() > 256 || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{text:?}: give http(s)://HOST:PORT in at most 256 printable ASCII characters"));
    }
    Ok(url)
}

fn demo_step(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!("{text:?}: seconds from 0 to 3600 (0.05 runs the demo in seconds)")),
    }
}

/// The demo workload with each step sleeping `step` seconds (its `STEP_S`).
fn demo_workload(step: Option<f64>) -> String {
    let workload = crate::place_cmd::DEMO_WORKLOAD;
    match step {
        Some(step) => workload.replace("STEP_S = \"10\"", &format!("STEP_S = \"{step}\"")),
        None => workload.to_string(),
    }
}

/// The reconfiguration policy: `[reconfigure]`'s guards, its mode unless `--reconfigure`
/// says otherwise; `--demo` reconfigures by itself (auto, every 30 s) unless told otherwise.
fn reconfigure_policy(args: &ServeArgs) -> anyhow::Result<gantry_server::control::reconfig::ReconfigurePolicy> {
    use gantry_server::control::reconfig::{ReconfigureMode, ReconfigurePolicy};
    // The demo plans every 30 s rather than every 5 minutes, so that a waiting MIG job is seen
    // served within its first minute.
    let mut policy = args.reconfigure_policy.clone().unwrap_or_else(|| match args.demo {
        true => ReconfigurePolicy { mode: ReconfigureMode::Auto, period_s: 30, ..ReconfigurePolicy::default() },
        false => ReconfigurePolicy::default(),
    });
    if let Some(mode) = &args.reconfigure {
        policy.mode = match mode.as_str() {
            "off" => ReconfigureMode::Off,
            "auto" => ReconfigureMode::Auto,
            _ => ReconfigureMode::Advise,
        };
    }
    policy.check().map_err(|e| anyhow::anyhow!(e))?;
    Ok(policy)
}

/// `--demo` without a `[billing]`: example list prices, so the chargeback has dollars in it.
fn demo_billing() -> gantry_server::meter::Billing {
    let prices = [("H100-SXM5-80GB", 4.0), ("A100-SXM4-80GB", 2.5), ("L4-24GB", 0.8)];
    gantry_server::meter::Billing {
        price_per_gpu_hour: prices.iter().map(|(m, p)| (m.to_string(), *p)).collect(),
        weights: Default::default(),
    }
}

/// `--demo`: submit the bundled demo workload unless the store already has jobs.
fn submit_demo(
    url: &str,
    trust: &gantry_wire::client::Tls,
    token: Option<&str>,
    workload: &str,
) -> Result<String, String> {
    let client = gantry_wire::client::Client::new(url, trust).map_err(|e| e.to_string())?;
    let (status, listed) = client.request(token, "GET", "/v1/jobs", None).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("listing jobs: HTTP {status}: {listed}"));
    }
    if listed.trim() != "[]" {
        return Ok("  demo: the store has jobs already, none submitted (`gantry queue` lists them)".into());
    }
    let (status, reply) = client.request(token, "POST", "/v1/jobs", Some(workload)).map_err(|e| e.to_string())?;
    if status != 201 {
        return Err(format!("HTTP {status}: {reply}"));
    }
    let ids: serde_json::Value = serde_json::from_str(&reply).map_err(|e| e.to_string())?;
    let ids: Vec<u64> = ids["ids"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(|v| v.as_u64()).collect());
    let (first, last) = (ids.first().copied().unwrap_or(0), ids.last().copied().unwrap_or(0));
    Ok(format!(
        "  demo: submitted the {} jobs of examples/demo-workload.toml as jobs {first}-{last}; they run for minutes.\n  \
         try: gantry queue; gantry why {last} (it waits for H100s); gantry logs {first}; gantry nodes; the dashboard",
        ids.len()
    ))
}

/// HTTPS from the operator's certificate, or from the data directory's CA (created on the
/// first start); `None` with --insecure-http. Also the banner's line about it.
fn tls_setup(
    args: &ServeArgs,
    data_dir: &std::path::Path,
    listen: std::net::SocketAddr,
) -> anyhow::Result<(Option<gantry_server::tls::TlsSetup>, String)> {
    use gantry_server::tls::{AgentCerts, TlsSetup};
    if args.insecure_http {
        let place = if listen.ip().is_loopback() { "on loopback" } else { "ON THE NETWORK" };
        return Ok((None, format!("  plain HTTP {place} (--insecure-http): tokens and jobs travel unencrypted")));
    }
    let agent_certs =
        if args.agent_certs.as_deref() == Some("required") { AgentCerts::Required } else { AgentCerts::Optional };
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let setup =
            TlsSetup { cert: cert.clone(), key: key.clone(), client_ca: args.tls_client_ca.clone(), agent_certs };
        return Ok((Some(setup), format!("  HTTPS with {}", cert.display())));
    }
    gantry_agent::runner::private_dir(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let names = gantry_server::tls::server_names(listen, &gantry_server::hostname(), &args.tls_names);
    let mut ca = gantry_server::tls::local_ca(data_dir, &names, agent_certs).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(client_ca) = &args.tls_client_ca {
        ca.setup.client_ca = Some(client_ca.clone());
    }
    let made = if ca.created { "created the CA" } else { "CA" };
    Ok((
        Some(ca.setup),
        format!(
            "  HTTPS: {made} {} (SHA-256 {}); clients verify with it (--ca FILE, $GANTRY_CA; the CLI on this machine finds it)\n  certificate names: {}",
            ca.ca_file.display(),
            ca.fingerprint,
            names.join(", ")
        ),
    ))
}

pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("GANTRY_DATA") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("neither --data, $GANTRY_DATA nor $HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/gantry"))
}

/// Say so when the open-file limit is below what `agents` remote agents' connections need
/// (each keeps one open, two for a moment when a task ends while its heartbeat is held).
fn check_open_files(limit: Result<u64, gantry_server::error::ServeError>, agents: usize) {
    let needed = 2 * agents as u64 + gantry_server::OPEN_FILES_BESIDE_AGENTS;
    match limit {
        Ok(limit) if limit < needed => tracing::warn!(
            limit,
            needed,
            "the open-file limit is below what {agents} agents' connections need: raise it (LimitNOFILE= in the systemd unit, or `ulimit -Hn`) or agents will be refused"
        ),
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(why) => tracing::warn!("{why}"),
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let args = merge(args)?;
    if args.preempt && args.queues.is_none() {
        bail!("--preempt needs --queues (priority and guarantees come from the queue file)");
    }
    if !args.local && args.fleet.is_none() {
        bail!(
            "without --local, agents on other machines serve the nodes of a fleet file: pass --fleet FILE (or run `gantry serve --local`)"
        );
    }
    let confine = &args.confine;
    if !args.local
        && (confine.confinement.is_some()
            || confine.memory_unasked.is_some()
            || confine.cpu_unasked.is_some()
            || confine.pids_per_task.is_some())
    {
        bail!(
            "--confinement, --memory-unasked, --cpu-unasked and --pids-per-task are for the agents of --local \
             (remote agents take them: gantry agent --help)"
        );
    }
    let task_defaults = args.confine.defaults()?;
    if args.local && (args.agent_timeout.is_some() || args.node_lost_after.is_some()) {
        bail!("--agent-timeout and --node-lost-after are for remote agents (serve without --local)");
    }
    if args.node_lost_after.unwrap_or(gantry_server::control::NODE_LOST_AFTER_DEFAULT_S)
        <= args.agent_timeout.unwrap_or(30)
    {
        bail!(
            "--node-lost-after must be longer than --agent-timeout (a silent node first gets no new work, then is lost)"
        );
    }
    let catalog = gantry_catalog::Catalog::embedded();
    init_logs(args.log_format.as_deref().unwrap_or("text"));
    let open_files = gantry_server::raise_open_files();
    let mut discovered = false;
    let (fleet_name, fleet) = match &args.fleet {
        Some(path) => crate::place_cmd::load_fleet(Some(path), catalog)?,
        // The demo jobs ask for the demo fleet's GPUs (H100s, MIG slices, shares).
        None if args.demo => crate::place_cmd::load_fleet(None, catalog)?,
        None => match gantry_agent::discover::discover(&gantry_server::hostname(), catalog) {
            Ok(found) => {
                for note in &found.notes {
                    eprintln!("note: {note}");
                }
                let gpus = found.node.gpus.len();
                discovered = true;
                (format!("this machine ({gpus} GPUs found by NVML)"), gantry_types::Fleet { nodes: vec![found.node] })
            }
            Err(why) => {
                eprintln!("{why}: using the bundled demo fleet (simulated GPUs; --fleet FILE for your own)");
                crate::place_cmd::load_fleet(None, catalog)?
            }
        },
    };
    check_open_files(open_files, if args.local { 0 } else { fleet.nodes.len() });
    let order = match &args.queues {
        None => gantry_engine::sched::Order::Fifo,
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read queue file {}", path.display()))?;
            let tree =
                gantry_spec::parse_queues(&text, catalog).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            for w in gantry_engine::quota::quota_warnings(&tree, &gantry_engine::quota::fleet_capacity(&fleet)) {
                eprintln!("warning: {}: {w}", path.display());
            }
            gantry_engine::sched::Order::FairShare(tree)
        }
    };
    let scheduling = gantry_engine::sched::SchedulerConfig {
        order,
        backfill: match args.backfill.as_deref().unwrap_or("reserve") {
            "off" => gantry_engine::sched::Backfill::Off,
            "greedy" => gantry_engine::sched::Backfill::Greedy,
            _ => gantry_engine::sched::Backfill::Reserve,
        },
        reserve_depth: 1,
        preempt: args.preempt,
    };
    let data_dir = match args.data.clone() {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let listen = args.listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address"));
    let store = store_choice(args.store.clone().or_else(|| std::env::var("GANTRY_STORE").ok()), args.standby)?;
    let (tls, tls_note) = tls_setup(&args, &data_dir, listen)?;
    let accounts =
        gantry_server::users::Accounts::for_this_process(args.users.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = gantry_server::ServeConfig {
        data_dir: data_dir.clone(),
        listen,
        tls,
        insecure_http: args.insecure_http,
        accounts: accounts.clone(),
        store: store.clone(),
        fleet,
        tick: std::time::Duration::from_secs(1),
        scheduling,
        simulate_tasks: None,
        measure_local_gpus: discovered,
        billing: match (&args.billing, args.demo) {
            (Some(billing), _) => billing.clone(),
            (None, true) => demo_billing(),
            (None, false) => Default::default(),
        },
        idle: args.idle.clone().unwrap_or_default(),
        admission: args.admission.clone().unwrap_or_default(),
        reconfigure: reconfigure_policy(&args)?,
        log: args.log.clone().unwrap_or_default(),
        advertise: args.advertise.clone(),
        confinement: gantry_server::local_agents::LocalConfinement {
            choice: args.confine.choice(),
            defaults: task_defaults,
        },
        group_commit: true,
        agents: if args.local {
            gantry_server::control::Agents::Local
        } else {
            gantry_server::control::Agents::Remote {
                heartbeat_timeout_s: args.agent_timeout.unwrap_or(30),
                node_lost_after_s: args.node_lost_after.unwrap_or(gantry_server::control::NODE_LOST_AFTER_DEFAULT_S),
            }
        },
    };
    let local = args.local;
    let demo = args.demo;
    let demo_step = args.demo_step;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let ca_file = config.tls.as_ref().and_then(|t| t.client_ca.clone()).filter(|_| args.tls_cert.is_none());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async move {
        if let gantry_server::StoreChoice::Postgres { url, standby: true } = &store {
            eprintln!(
                "standby: waiting to lead {} (takes over when the leader stops or its lease runs out)",
                gantry_store::redact_url(url)
            );
        }
        let rejoin_config = config.clone();
        let mut running = gantry_server::start(config).await.map_err(|e| match e {
            gantry_server::error::ServeError::Store(gantry_store::StoreError::Led { .. }) => anyhow::anyhow!(
                "{e}\n  hint: start this one with --standby to take over when that controller stops"
            ),
            e => anyhow::anyhow!(e),
        })?;
        let url = format!("{scheme}://{}", running.addr);
        let state = match &store {
            gantry_server::StoreChoice::Sqlite => format!("data in {}", data_dir.display()),
            gantry_server::StoreChoice::Postgres { url, .. } => format!(
                "state in {} (leading, term {}), logs in {}",
                gantry_store::redact_url(url),
                running.term,
                data_dir.display()
            ),
        };
        eprintln!(
            "gantry controller on {url} — {fleet_name}, {state}\n  submit: gantry submit FILE   watch: gantry queue   dashboard: {url}/ui   stop: Ctrl-C",
        );
        eprintln!("{tls_note}");
        match &accounts.single_user {
            Some(me) => eprintln!(
                "  single-user mode (not root): every task runs as {me:?}; tokens only for user {me:?} (and admin)"
            ),
            None => eprintln!(
                "  tasks run as their user's Unix account on each node ([users] maps names; admin's own jobs: {:?})",
                accounts.account(gantry_server::users::ADMIN)
            ),
        }
        for (confinement, nodes) in running.confinement() {
            eprintln!("{}", crate::confine_args::banner_line(&confinement, &nodes));
        }
        if !local {
            eprintln!(
                "  remote agents: each node runs `gantry agent --server {url} --ca ca.pem --token-file FILE` (gantry token create NAME --role agent --node NODE)"
            );
        }
        eprintln!(
            "  dashboard login: paste the admin token from {} at {url}/ui/login",
            data_dir.join("admin.token").display(),
        );
        if let Some(path) = &running.admin_token_file {
            eprintln!(
                "  created the admin token in {} (mode 0600); the CLI on this machine uses it by default",
                path.display()
            );
        }
        if demo {
            let token = std::fs::read_to_string(data_dir.join("admin.token")).ok().map(|t| t.trim().to_string());
            let trust = gantry_wire::client::Tls { ca: ca_file, ..Default::default() };
            let workload = demo_workload(demo_step);
            let said =
                tokio::task::spawn_blocking(move || submit_demo(&url, &trust, token.as_deref(), &workload)).await;
            match said {
                Ok(Ok(line)) => eprintln!("{line}"),
                Ok(Err(e)) => eprintln!("demo workload not submitted: {e}"),
                Err(e) => eprintln!("demo workload not submitted: {e}"),
            }
        }
        let stop = stop_signal();
        tokio::pin!(stop);
        loop {
            let why = tokio::select! {
                stopped = &mut stop => {
                    stopped?;
                    break;
                }
                why = running.store_failed() => why,
            };
            let gantry_server::StoreChoice::Postgres { url, .. } = &store else {
                eprintln!(
                    "error: the store failed: {why}\nstopping: nothing this controller did since is lost (it was never acknowledged); restart it to recover from what was committed"
                );
                running.shutdown().await;
                return Ok(ExitCode::from(1));
            };
            // PostgreSQL restarted, the network cut the connection, or another controller took
            // over: step down, and wait to lead again on the same address as a standby, which
            // recovers from what was committed (nothing unacknowledged is lost).
            eprintln!(
                "stepping down: {why}\n  rejoining as a standby of {} on {} (no supervisor needed; Ctrl-C stops)",
                gantry_store::redact_url(url),
                running.addr
            );
            let mut again = rejoin_config.clone();
            again.listen = running.addr;
            again.store = gantry_server::StoreChoice::Postgres { url: url.clone(), standby: true };
            running.shutdown().await;
            running = tokio::select! {
                stopped = &mut stop => {
                    stopped?;
                    return Ok(ExitCode::SUCCESS);
                }
                started = gantry_server::start(again) => started?,
            };
            eprintln!(
                "gantry controller on {scheme}://{} — state in {} (leading, term {}) again",
                running.addr,
                gantry_store::redact_url(url),
                running.term
            );
        }
        eprintln!("stopping (running tasks keep running; the next start re-adopts them)");
        running.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_url_is_written_as_clients_write_theirs() {
        assert_eq!(advertise_url("https://ctl-a.example:8177/"), Ok("https://ctl-a.example:8177".to_string()));
        for bad in ["ctl-a:8177", "https://ctl-a:8177/v1", "https://u@ctl-a:1", "https://contrôle:1", "https://a b:1"]
        {
            assert!(advertise_url(bad).is_err(), "{bad}");
        }
        assert!(advertise_url(&format!("https://{}:1", "a".repeat(300))).is_err());
    }

    /// Every demo job runs at least a minute by default (long enough to see it queue, wait
    /// with a reason and run), and `--demo-step` scales every one of them.
    #[test]
    fn the_demo_runs_for_minutes_unless_told_otherwise() {
        let catalog = gantry_catalog::Catalog::embedded();
        let seconds = |text: &str| -> Vec<f64> {
            let jobs = gantry_spec::parse_workload(text, catalog).expect("the demo parses");
            jobs.iter()
                .map(|job| {
                    let env: std::collections::BTreeMap<_, _> = job.run.env.iter().cloned().collect();
                    let number = |k: &str| env.get(k).and_then(|v| v.parse::<f64>().ok()).expect("STEPS and STEP_S");
                    number("STEPS") * number("STEP_S")
                })
                .collect()
        };
        let default = seconds(&demo_workload(None));
        assert_eq!(default.len(), 25);
        assert!(default.iter().all(|&s| s >= 60.0), "{default:?}");
        assert!(seconds(&demo_workload(Some(0.05))).iter().all(|&s| s <= 2.0));
        assert!(demo_step("-1").is_err() && demo_step("x").is_err() && demo_step("0.5").is_ok());
    }
}
