//! `gantry agent`: the node agent for one machine, talking to a controller over HTTP. Its GPUs
//! come from NVML, or from an inventory file (a fleet file; `--node` picks the node when it
//! has several) on machines without a driver.

use anyhow::{Context, bail};
use clap::Args;
use gantry_wire::AgentGpu;
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # on the controller host: one agent token per node, its secret into a file for that node
  gantry token create gpu01-agent --role agent --node gpu01 > gpu01.token
  # on node gpu01 (the secret from a file or $GANTRY_TOKEN, never on the command line)
  gantry agent --server https://controller:8177 --ca /etc/gantry/ca.pem --token-file /etc/gantry/agent.token
  # with a client certificate for this node (mutual TLS; `gantry cert agent gpu01 --fleet fleet.toml` on the controller host)
  gantry agent --server https://controller:8177 --ca /etc/gantry/ca.pem --token-file /etc/gantry/agent.token \\
    --tls-cert /etc/gantry/gpu01.pem --tls-key /etc/gantry/gpu01.key
  # a machine without a driver (or a test): its GPUs from a fleet file's node
  gantry agent --server https://127.0.0.1:8177 --inventory fleet.toml --node n2 --data /tmp/agent-n2";

#[derive(Args)]
pub struct AgentArgs {
    /// The controller (default: $GANTRY_SERVER, else https://127.0.0.1:8177); several,
    /// comma-separated, for a leader and its standbys: the agent follows whichever leads.
    #[arg(long, value_name = "URL[,URL...]")]
    server: Option<String>,
    /// The CA file the controller's certificate is verified with: a copy of the controller's
    /// ca.pem (default: $GANTRY_CA, else the public web roots).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// This node's client certificate (PEM), for mutual TLS: `gantry cert agent NODE`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Keep it 0600.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A file holding this node's agent token (else $GANTRY_TOKEN). Keep it 0600.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Refused: a secret on the command line is readable by every user of the machine (ps,
    /// /proc). Use --token-file or $GANTRY_TOKEN.
    #[arg(long, value_name = "TOKEN", hide = true)]
    token: Option<String>,
    /// The node this agent serves, as the controller's fleet file names it. Default: the
    /// inventory file's only node, else this machine's host name.
    #[arg(long)]
    node: Option<String>,
    /// Take the GPUs from this fleet file's node instead of NVML (no driver here, or a test).
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Where task claims and logs go. Default: $GANTRY_DATA/agent-NODE, else
    /// ~/.local/share/gantry/agent-NODE.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Simulate this node's MIG hardware in DATA/fake-mig.json (starting from the inventory's
    /// modes) so that the controller's layout orders can be carried out without a GPU (tests,
    /// demos). Without it, layout orders go through NVML; with --inventory and no NVML, only
    /// changes without MIG are made.
    #[arg(long)]
    fake_mig: bool,
    /// Log format on stderr: text, or json.
    #[arg(long, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Allow a plain http:// --server on another machine (a controller run with
    /// --insecure-http behind a network you trust): the agent's token crosses it in the clear.
    #[arg(long)]
    insecure_http: bool,
    #[command(flatten)]
    confine: crate::confine_args::ConfineArgs,
}

/// The node's name and GPUs: from the inventory file, else NVML.
fn inventory(args: &AgentArgs) -> anyhow::Result<(String, Vec<AgentGpu>)> {
    let catalog = gantry_catalog::Catalog::embedded();
    let node = match &args.inventory {
        Some(path) => {
            let (_, fleet) = crate::place_cmd::load_fleet(Some(path), catalog)?;
            let names: Vec<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).collect();
            match &args.node {
                Some(name) => {
                    fleet.nodes.iter().find(|n| &n.name == name).cloned().with_context(|| {
                        format!("{}: no node {name:?} (it has: {})", path.display(), names.join(", "))
                    })?
                }
                None if fleet.nodes.len() == 1 => fleet.nodes[0].clone(),
                None => {
                    bail!("{} has {} nodes: pick one with --node ({})", path.display(), names.len(), names.join(", "))
                }
            }
        }
        None => {
            let name = args.node.clone().unwrap_or_else(gantry_server::hostname);
            match gantry_agent::discover::discover(&name, catalog) {
                Ok(found) => {
                    for note in &found.notes {
                        eprintln!("note: {note}");
                    }
                    found.node
                }
                Err(why) => bail!("{why}: pass --inventory FILE (a fleet file; --node picks its node)"),
            }
        }
    };
    let gpus = node
        .gpus
        .iter()
        .map(|g| {
            AgentGpu { index: g.index, uuid: g.uuid.clone(), model: g.model.clone(), mig_mode: None, mig: Vec::new() }
                .with_mode(&g.mode)
        })
        .collect();
    Ok((node.name, gpus))
}

/// Where layout orders go: simulated hardware (`--fake-mig`), else NVML when there is a
/// driver, else none.
fn mig_backend(
    args: &AgentArgs,
    data_dir: &std::path::Path,
    gpus: &[AgentGpu],
) -> anyhow::Result<Option<gantry_agent::layouts::MigHandle>> {
    use gantry_agent::layouts::MigHandle;
    if args.fake_mig {
        gantry_agent::runner::private_dir(data_dir)
            .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
        let modes: Vec<(u32, String, gantry_types::GpuMode)> =
            gpus.iter().map(|g| (g.index, g.model.clone(), g.mode().unwrap_or(gantry_types::GpuMode::Whole))).collect();
        let backend = gantry_agent::mig::FileBackend::open(&data_dir.join("fake-mig.json"), &modes)
            .map_err(|e| anyhow::anyhow!("--fake-mig: {e}"))?;
        return Ok(Some(MigHandle::new(backend)));
    }
    if args.inventory.is_some() {
        return Ok(None);
    }
    Ok(gantry_agent::mig_nvml::NvmlMig::new().ok().map(MigHandle::new))
}

/// The agent's secret: from `--token-file`, else `$GANTRY_TOKEN`; never from argv.
fn agent_secret(args: &AgentArgs) -> anyhow::Result<String> {
    if args.token.is_some() {
        bail!(
            "the agent takes its token from --token-file FILE or $GANTRY_TOKEN, not from --token: \
             a command line is readable by every user of the machine"
        );
    }
    let secret = match &args.token_file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => std::env::var("GANTRY_TOKEN").context(
            "no token: pass --token-file FILE or set $GANTRY_TOKEN (gantry token create NAME --role agent --node NODE)",
        )?,
    };
    let secret = secret.trim().to_string();
    if secret.is_empty() {
        bail!("the agent token is empty");
    }
    Ok(secret)
}

pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let defaults = args.confine.defaults()?;
    let (node, gpus) = inventory(&args)?;
    gantry_agent::node::check_node_name(&node).map_err(|e| anyhow::anyhow!(e))?;
    let server = args
        .server
        .clone()
        .or_else(|| std::env::var("GANTRY_SERVER").ok())
        .unwrap_or_else(|| format!("https://{}", crate::serve_cmd::DEFAULT_LISTEN));
    let data_dir = match &args.data {
        Some(dir) => dir.clone(),
        None => crate::serve_cmd::default_data_dir()?.join(format!("agent-{node}")),
    };
    crate::serve_cmd::init_logs(args.log_format.as_deref().unwrap_or("text"));
    let mig = mig_backend(&args, &data_dir, &gpus)?;
    let mut config = gantry_agent::node::AgentConfig {
        mig,
        link: std::sync::Arc::new(http_link(&args, &server)?),
        node,
        gpus,
        data_dir,
        wait: HELD_FOR,
        retry: std::time::Duration::from_secs(1),
        simulate: None,
        measure_gpus: true,
        confine: args.confine.choice(),
        confinement: None,
        defaults,
        devices: if args.inventory.is_some() {
            gantry_agent::node::Devices::Fake
        } else {
            gantry_agent::node::Devices::Driver
        },
    };
    gantry_agent::node::prepare_data_dir(&mut config).map_err(|e| anyhow::anyhow!(e))?;
    let confinement = gantry_agent::node::confinement(&config).map_err(|e| anyhow::anyhow!(e))?;
    let confinement_line = crate::confine_args::banner_line(&confinement.report(), &[]);
    config.confinement = Some(confinement);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async move {
        print_banner(&config, &server, &confinement_line);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if crate::serve_cmd::stop_signal().await.is_ok() {
                let _ = stop_tx.send(());
            }
        });
        gantry_agent::node::run(config, stop_rx).await.map_err(|e| anyhow::anyhow!(e))?;
        eprintln!("stopping (running tasks keep running; the next start re-adopts them)");
        Ok(ExitCode::SUCCESS)
    })
}

/// How long the controller holds a heartbeat when it has nothing to order: the client waits
/// that long more for an answer to begin before it tries the next controller.
const HELD_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// The agent's link to its controllers: the HTTP client with the CA, the client certificate
/// and the agent's token.
fn http_link(args: &AgentArgs, server: &str) -> anyhow::Result<gantry_agent::node::HttpLink> {
    let token = agent_secret(args)?;
    let trust = gantry_wire::client::Tls {
        ca: args.ca.clone().or_else(|| std::env::var_os("GANTRY_CA").map(PathBuf::from)),
        client_cert: args.tls_cert.clone().zip(args.tls_key.clone()),
        plain_http_off_loopback: args.insecure_http,
    };
    let client = gantry_wire::client::Client::new(server, &trust).map_err(|e| anyhow::anyhow!(e))?;
    Ok(gantry_agent::node::HttpLink { client: client.holding(HELD_FOR), token })
}

/// Where the agent serves, as whom its tasks run, how it confines them.
fn print_banner(config: &gantry_agent::node::AgentConfig, server: &str, confinement_line: &str) {
    eprintln!(
        "gantry agent for node {} ({} GPUs) → {server}, data in {}; stop: Ctrl-C (tasks keep running)",
        config.node,
        config.gpus.len(),
        config.data_dir.display()
    );
    match gantry_agent::account::Identity::of_this_process() {
        gantry_agent::account::Identity::Root if !gantry_agent::account::setpriv_installed() => {
            eprintln!("warning: setpriv (util-linux) is not installed: tasks of accounts other than root cannot start")
        }
        gantry_agent::account::Identity::Root => eprintln!("  tasks run as their job's Unix account on this node"),
        gantry_agent::account::Identity::User(me) => eprintln!(
            "  not root: only tasks of Unix account {:?} run here (others are refused)",
            me.unwrap_or_default()
        ),
    }
    eprintln!("{confinement_line}");
}
