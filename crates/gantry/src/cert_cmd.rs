//! `gantry cert`: the controller's CA on the command line — its fingerprint (to check a copy
//! of `ca.pem` out of band), and client certificates for agents (mutual TLS), signed by the
//! CA in the controller's data directory. Run on the controller host, by its operator: it
//! reads `ca.key`.

use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXAMPLES: &str = "Examples:
  # on the controller host: a client certificate for node gpu01 of fleet.toml, into /etc/gantry/certs
  gantry cert agent gpu01 --fleet fleet.toml --out /etc/gantry/certs
  # then copy gpu01.pem, gpu01.key and ca.pem to gpu01 and run there
  gantry agent --server https://controller:8177 --ca ca.pem --tls-cert gpu01.pem --tls-key gpu01.key --token-file agent.token
  # the CA's fingerprint, to compare with what a client was given
  gantry cert fingerprint";

#[derive(Args)]
pub struct CertArgs {
    #[command(subcommand)]
    what: CertCommand,
    /// The controller's data directory (default: $GANTRY_DATA, else $XDG_DATA_HOME/gantry or ~/.local/share/gantry).
    #[arg(long, value_name = "DIR", global = true)]
    data: Option<PathBuf>,
}

#[derive(Subcommand)]
enum CertCommand {
    /// Issue a client certificate for one node's agent: NODE.pem and NODE.key (0600).
    Agent {
        /// The node, as the fleet file names it (a DNS name).
        node: String,
        /// The fleet file the controller serves (`gantry serve --fleet FILE`): a certificate is
        /// issued only for one of its nodes.
        #[arg(long, value_name = "FILE")]
        fleet: PathBuf,
        /// Where to write the two files (default: the current directory).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print the CA certificate's SHA-256 fingerprint.
    Fingerprint,
}

pub fn run(args: CertArgs) -> anyhow::Result<ExitCode> {
    let data = match args.data {
        Some(dir) => dir,
        None => crate::serve_cmd::default_data_dir()?,
    };
    match args.what {
        CertCommand::Fingerprint => {
            let ca = data.join(gantry_server::tls::CA_CERT);
            let fingerprint = gantry_server::tls::fingerprint(&ca).map_err(|e| anyhow::anyhow!(e))?;
            println!("{fingerprint}  {}", ca.display());
        }
        CertCommand::Agent { node, fleet, out } => {
            in_fleet(&node, &fleet)?;
            let (cert, key) = gantry_server::tls::issue_agent_cert(&data, &node).map_err(|e| anyhow::anyhow!(e))?;
            let out = out.unwrap_or_else(|| PathBuf::from("."));
            std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
            let (cert_file, key_file) = (out.join(format!("{node}.pem")), out.join(format!("{node}.key")));
            write_new(&key_file, &key, 0o600)?;
            write_new(&cert_file, &cert, 0o644)?;
            println!("{}\n{}", cert_file.display(), key_file.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A certificate names a node the controller serves, never one it does not know of (which a
/// later fleet change could hand to someone else's machine).
fn in_fleet(node: &str, fleet: &std::path::Path) -> anyhow::Result<()> {
    let (name, fleet) = crate::place_cmd::load_fleet(Some(fleet), gantry_catalog::Catalog::embedded())?;
    if fleet.nodes.iter().any(|n| n.name == node) {
        return Ok(());
    }
    let mut names: Vec<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).take(6).collect();
    if fleet.nodes.len() > names.len() {
        names.push("…");
    }
    anyhow::bail!(
        "node {node:?} is not in {name} (its nodes: {}): no certificate issued\n  hint: add the node to the fleet file first, \
         or name the fleet file the controller serves",
        names.join(", ")
    )
}

/// Write a file that must not exist yet (an agent's key is never overwritten by accident).
fn write_new(path: &std::path::Path, text: &str, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist yet)", path.display()))?;
    std::io::Write::write_all(&mut file, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}
