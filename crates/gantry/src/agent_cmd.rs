//! `gantry agent`: the node agent for one machine, talking to a controller over HTTP. Its GPUs
//! come from NVML, or from an inventory file (a fleet file; `--node` picks the node when it
//! has several) on machines without a driver.

use anyhow::Context;
use clap::Args;
use gantry_agent::node::Devices;
use gantry_agent::setup;
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

/// The node's name and GPUs: from the inventory file, else NVML (whose notes are printed).
fn inventory(args: &AgentArgs) -> anyhow::Result<setup::Inventory> {
    let catalog = gantry_catalog::Catalog::embedded();
    let found = match &args.inventory {
        Some(path) => {
            let (_, fleet) = crate::place_cmd::load_fleet(Some(path), catalog)?;
            setup::from_inventory(path, &fleet, args.node.as_deref())?
        }
        None => setup::from_nvml(&args.node.clone().unwrap_or_else(gantry_server::hostname), catalog)?,
    };
    for note in &found.notes {
        eprintln!("note: {note}");
    }
    Ok(found)
}

pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let defaults = args.confine.defaults()?;
    let setup::Inventory { node, gpus, .. } = inventory(&args)?;
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
    let devices = if args.inventory.is_some() { Devices::Fake } else { Devices::Driver };
    let mig = setup::mig_backend(args.fake_mig, devices, &data_dir, &gpus)?;
    let mut config = gantry_agent::node::AgentConfig {
        mig,
        link: std::sync::Arc::new(http_link(&args, &server)?),
        node,
        gpus,
        data_dir,
        wait: setup::HELD_FOR,
        retry: std::time::Duration::from_secs(1),
        simulate: None,
        measure_gpus: true,
        confine: args.confine.choice(),
        confinement: None,
        defaults,
        devices,
    };
    gantry_agent::node::prepare_data_dir(&mut config).map_err(|e| anyhow::anyhow!(e))?;
    let confinement = gantry_agent::node::confinement(&config).map_err(|e| anyhow::anyhow!(e))?;
    let confinement_line = gantry_agent::setup::confinement_line(&confinement.report(), &[]);
    config.confinement = Some(confinement);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the runtime")?;
    rt.block_on(async move {
        eprintln!("{}", setup::banner(&config, &server, &confinement_line));
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

/// The agent's link to its controllers: the HTTP client with the CA, the client certificate
/// and the agent's token.
fn http_link(args: &AgentArgs, server: &str) -> anyhow::Result<gantry_agent::node::HttpLink> {
    let token = setup::agent_secret(args.token.is_some(), args.token_file.as_deref())?;
    let trust = gantry_wire::client::Tls {
        ca: args.ca.clone().or_else(|| std::env::var_os("GANTRY_CA").map(PathBuf::from)),
        client_cert: args.tls_cert.clone().zip(args.tls_key.clone()),
        plain_http_off_loopback: args.insecure_http,
    };
    Ok(setup::http_link(server, &trust, token)?)
}
