//! The TLS a controller serves: the operator's certificate, or one made from the data
//! directory's own CA (created on the first start), or none with `--insecure-http` — and what
//! the start-up banner says about it, as data.

use super::SettingsError;
use crate::tls::{AgentCerts, TlsSetup};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The TLS flags (or `[tls]`), after the configuration file is merged in.
#[derive(Clone, Debug, Default)]
pub struct TlsFlags {
    pub insecure_http: bool,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
    /// Other names clients reach the controller by (for the certificate the CA makes).
    pub names: Vec<String>,
    /// `required`: agents must present a client certificate; else optional.
    pub agent_certs: Option<String>,
}

/// Which TLS the controller serves, for the banner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsChosen {
    /// Plain HTTP, on loopback or not.
    Plain { loopback: bool },
    /// The operator's certificate.
    Operator { cert: PathBuf },
    /// A certificate from the data directory's CA.
    LocalCa { created: bool, ca_file: PathBuf, fingerprint: String, names: Vec<String> },
}

/// The TLS setup for `flags` (`None`: plain HTTP), and what was chosen.
pub fn tls_setup(
    flags: &TlsFlags,
    data_dir: &Path,
    listen: SocketAddr,
) -> Result<(Option<TlsSetup>, TlsChosen), SettingsError> {
    if flags.insecure_http {
        if flags.cert.is_some() || flags.agent_certs.is_some() {
            return Err(SettingsError::Conflict(
                "--insecure-http turns TLS off: it cannot go with TLS certificates or --agent-certs",
            ));
        }
        return Ok((None, TlsChosen::Plain { loopback: listen.ip().is_loopback() }));
    }
    let agent_certs =
        if flags.agent_certs.as_deref() == Some("required") { AgentCerts::Required } else { AgentCerts::Optional };
    if let (Some(cert), Some(key)) = (&flags.cert, &flags.key) {
        let setup = TlsSetup { cert: cert.clone(), key: key.clone(), client_ca: flags.client_ca.clone(), agent_certs };
        return Ok((Some(setup), TlsChosen::Operator { cert: cert.clone() }));
    }
    let dir = |message: String| SettingsError::DataDir { path: data_dir.display().to_string(), message };
    gantry_agent::runner::private_dir(data_dir).map_err(|e| dir(format!("cannot create the data directory: {e}")))?;
    let names = crate::tls::server_names(listen, &crate::hostname(), &flags.names);
    let mut ca = crate::tls::local_ca(data_dir, &names, agent_certs).map_err(|e| dir(e.to_string()))?;
    if let Some(client_ca) = &flags.client_ca {
        ca.setup.client_ca = Some(client_ca.clone());
    }
    let chosen = TlsChosen::LocalCa { created: ca.created, ca_file: ca.ca_file, fingerprint: ca.fingerprint, names };
    Ok((Some(ca.setup), chosen))
}
