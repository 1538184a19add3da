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
  # controller only: each node of the fleet file runs `gantry agent`
  gantry serve --fleet fleet.toml --listen 0.0.0.0:8177
  gantry token create gpu01-agent --role agent --node gpu01   # one agent token per node";

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
    /// With remote agents: a node whose agent is silent this long gets no new work (what
    /// runs there keeps its place until the agent is back). Default 30.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    agent_timeout: Option<u64>,
    /// Data directory: the store (gantry.db) and task logs. Default: $GANTRY_DATA, else
    /// ~/.local/share/gantry.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Address to listen on (plain HTTP: keep it on loopback or a trusted network; default
    /// 127.0.0.1:8177).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
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
    /// Configuration file (TOML) with any of: listen, data, fleet, queues, backfill, preempt,
    /// log_format; paths relative to the file. Flags given on the command line win.
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
}

/// `gantry serve --config FILE`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<std::net::SocketAddr>,
    data: Option<PathBuf>,
    fleet: Option<PathBuf>,
    queues: Option<PathBuf>,
    backfill: Option<String>,
    preempt: Option<bool>,
    log_format: Option<String>,
    billing: Option<gantry_server::meter::Billing>,
    idle: Option<gantry_server::idle::IdlePolicy>,
    admission: Option<gantry_server::admission::AdmissionLimits>,
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

/// This machine's name (the node name of a discovered fleet).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// `gantry discover`: what NVML finds on this machine.
pub fn discover(json: bool) -> anyhow::Result<ExitCode> {
    match gantry_agent::discover::discover(&hostname(), gantry_catalog::Catalog::embedded()) {
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

/// `--demo` without a `[billing]`: example list prices, so the chargeback has dollars in it.
fn demo_billing() -> gantry_server::meter::Billing {
    let prices = [("H100-SXM5-80GB", 4.0), ("A100-SXM4-80GB", 2.5), ("L4-24GB", 0.8)];
    gantry_server::meter::Billing {
        price_per_gpu_hour: prices.iter().map(|(m, p)| (m.to_string(), *p)).collect(),
        weights: Default::default(),
    }
}

/// `--demo`: submit the bundled demo workload unless the store already has jobs.
fn submit_demo(url: &str, token: Option<&str>) -> Result<String, String> {
    let (status, listed) =
        gantry_wire::client::request(url, token, "GET", "/v1/jobs", None).map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("listing jobs: HTTP {status}: {listed}"));
    }
    if listed.trim() != "[]" {
        return Ok("  demo: the store has jobs already, none submitted (`gantry queue` lists them)".into());
    }
    let workload = crate::place_cmd::DEMO_WORKLOAD;
    let (status, reply) =
        gantry_wire::client::request(url, token, "POST", "/v1/jobs", Some(workload)).map_err(|e| e.to_string())?;
    if status != 201 {
        return Err(format!("HTTP {status}: {reply}"));
    }
    let ids: serde_json::Value = serde_json::from_str(&reply).map_err(|e| e.to_string())?;
    let count = ids["ids"].as_array().map_or(0, Vec::len);
    Ok(format!(
        "  demo: submitted the {count} jobs of examples/demo-workload.toml; watch them here, or run `gantry queue`, `gantry nodes`, `gantry why ID`, `gantry logs ID`"
    ))
}

pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("GANTRY_DATA") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("neither --data, $GANTRY_DATA nor $HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/gantry"))
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
    if args.local && args.agent_timeout.is_some() {
        bail!("--agent-timeout is for remote agents (serve without --local)");
    }
    let catalog = gantry_catalog::Catalog::embedded();
    init_logs(args.log_format.as_deref().unwrap_or("text"));
    let mut discovered = false;
    let (fleet_name, fleet) = match &args.fleet {
        Some(path) => crate::place_cmd::load_fleet(Some(path), catalog)?,
        // The demo jobs ask for the demo fleet's GPUs (H100s, MIG slices, shares).
        None if args.demo => crate::place_cmd::load_fleet(None, catalog)?,
        None => match gantry_agent::discover::discover(&hostname(), catalog) {
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
    let data_dir = match args.data {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    let config = gantry_server::ServeConfig {
        data_dir: data_dir.clone(),
        listen: args.listen.unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address")),
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
        group_commit: true,
        agents: if args.local {
            gantry_server::control::Agents::Local
        } else {
            gantry_server::control::Agents::Remote { heartbeat_timeout_s: args.agent_timeout.unwrap_or(30) }
        },
    };
    let local = args.local;
    let demo = args.demo;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async move {
        let running = gantry_server::start(config).await.map_err(|e| anyhow::anyhow!(e))?;
        eprintln!(
            "gantry controller on http://{} — {fleet_name}, data in {}\n  submit: gantry submit FILE   watch: gantry queue   dashboard: http://{}/ui   stop: Ctrl-C",
            running.addr,
            data_dir.display(),
            running.addr
        );
        if !local {
            eprintln!(
                "  remote agents: each node runs `gantry agent --server http://{} --token-file FILE` (gantry token create NAME --role agent --node NODE)",
                running.addr
            );
        }
        eprintln!(
            "  dashboard login: paste the admin token from {} at http://{}/ui/login",
            data_dir.join("admin.token").display(),
            running.addr
        );
        if let Some(path) = &running.admin_token_file {
            eprintln!(
                "  created the admin token in {} (mode 0600); the CLI on this machine uses it by default",
                path.display()
            );
        }
        if demo {
            let url = format!("http://{}", running.addr);
            let token = std::fs::read_to_string(data_dir.join("admin.token")).ok().map(|t| t.trim().to_string());
            let said = tokio::task::spawn_blocking(move || submit_demo(&url, token.as_deref())).await;
            match said {
                Ok(Ok(line)) => eprintln!("{line}"),
                Ok(Err(e)) => eprintln!("demo workload not submitted: {e}"),
                Err(e) => eprintln!("demo workload not submitted: {e}"),
            }
        }
        stop_signal().await?;
        eprintln!("stopping (running tasks keep running; the next start re-adopts them)");
        running.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
