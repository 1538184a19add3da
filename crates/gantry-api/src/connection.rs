//! How a client finds and reaches a controller: its address, the CA its certificate is checked
//! against, the token sent — each from a flag, else the environment, else the client profile
//! `gantry login` saved (`profile.rs`), else the controller's data directory on this machine
//! (what `gantry serve --local` leaves there) — and the call itself, a refusal read from the
//! API's error body. The CLI and the Slurm commands use it.

use crate::ErrorBody;
use crate::profile::Profile;
use gantry_wire::client::{Client, Tls};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// Where `gantry serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8177";
/// The data directory's CA certificate (`gantry serve` writes it there).
pub const CA_FILE: &str = "ca.pem";
/// The data directory's first admin token (mode 0600, written at the first start).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// How long the controller waits for a node's agent to send a task's output: a live agent
/// answers within one heartbeat round trip; one that has not answered in this long is stuck
/// or gone. A reader waits this long for the reply.
pub const OUTPUT_WAIT: Duration = Duration::from_secs(10);

/// The data directory: $GANTRY_DATA, else $XDG_DATA_HOME/gantry, else ~/.local/share/gantry
/// (`None` without $HOME).
pub fn default_data_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GANTRY_DATA") {
        return Some(PathBuf::from(dir));
    }
    // XDG's base directories: $XDG_DATA_HOME when it is an absolute path, else ~/.local/share.
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(xdg.join("gantry"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share/gantry"))
}

/// A controller to call, as the flags gave it (each `None` falls back as its field says).
#[derive(Clone, Debug, Default)]
pub struct Connection {
    /// URL(s), comma-separated; else $GANTRY_SERVER, else the profile's, else `https://`
    /// [`DEFAULT_LISTEN`].
    pub server: Option<String>,
    /// CA file; else $GANTRY_CA, else the profile's, else the data directory's [`CA_FILE`]
    /// when there is one.
    pub ca: Option<PathBuf>,
    /// Token; else $GANTRY_TOKEN, else the profile's, else the data directory's
    /// [`ADMIN_TOKEN_FILE`].
    pub token: Option<String>,
    /// The controller's data directory; else [`default_data_dir`].
    pub data: Option<PathBuf>,
    /// Allow plain `http://` off this machine.
    pub insecure_http: bool,
}

/// A call that failed: unreachable, or refused by the controller.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No answer: transparent, so a chain of causes (`{:#}`) says it once, not twice.
    #[error(transparent)]
    Client(#[from] gantry_wire::client::ClientError),
    #[error(
        "{message} (HTTP 401)\n  hint: {token_from}; point the CLI at the controller's data directory (--data DIR or $GANTRY_DATA, as given to `gantry serve --data`) or give a token with --token or $GANTRY_TOKEN"
    )]
    Unauthorized { message: String, token_from: String },
    #[error("{message} (HTTP {status})")]
    Refused { status: u16, message: String },
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
}

impl Connection {
    pub fn url(&self) -> String {
        self.url_with(&Profile::default())
    }

    fn url_with(&self, profile: &Profile) -> String {
        self.server
            .clone()
            .or_else(|| std::env::var("GANTRY_SERVER").ok())
            .or_else(|| profile.server.clone())
            .unwrap_or_else(|| format!("https://{DEFAULT_LISTEN}"))
    }

    fn data_dir(&self) -> Option<PathBuf> {
        self.data.clone().or_else(default_data_dir)
    }

    /// What the controller's certificate is checked against.
    fn trust(&self, profile: &Profile) -> Tls {
        let ca = self
            .ca
            .clone()
            .or_else(|| std::env::var_os("GANTRY_CA").map(PathBuf::from))
            .or_else(|| profile.ca.clone())
            .or_else(|| self.data_dir().map(|d| d.join(CA_FILE)).filter(|p| p.exists()));
        Tls { ca, client_cert: None, plain_http_off_loopback: self.insecure_http }
    }

    /// The token to send, and where it came from (for the hint when it is refused).
    fn token(&self, profile: &Profile) -> (Option<String>, String) {
        if let Some(t) = self.token.clone() {
            return (Some(t), "the token sent came from --token".into());
        }
        if let Ok(t) = std::env::var("GANTRY_TOKEN") {
            return (Some(t), "the token sent came from $GANTRY_TOKEN".into());
        }
        if let Some(t) = profile.token.clone() {
            let at = crate::profile::path().map_or_else(|| "the profile".into(), |p| p.display().to_string());
            return (Some(t), format!("the token sent came from {at} (`gantry login`)"));
        }
        let Some(data) = self.data_dir() else {
            return (None, "no token was sent (no --token, no $GANTRY_TOKEN, no data directory)".into());
        };
        let path = data.join(ADMIN_TOKEN_FILE);
        match std::fs::read_to_string(&path) {
            Ok(t) => (Some(t.trim().to_string()), format!("the token sent came from {}", path.display())),
            Err(_) => (None, format!("no token was sent (no --token, no $GANTRY_TOKEN, no {})", path.display())),
        }
    }

    /// Call the API: the reply as JSON (a reply that is not JSON as a string); a 4xx or 5xx
    /// is an error with the controller's message (and, for a refused token, where this one
    /// came from and how to give another).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Value, CallError> {
        let profile = crate::profile::current()?.unwrap_or_default();
        self.call_as(&profile, method, path, body, headers)
    }

    /// A `GET` with only what this connection names (and the environment): what `gantry
    /// login` checks before it saves a profile (an old profile, even a broken one, plays no
    /// part).
    pub fn call_without_profile(&self, method: &str, path: &str) -> Result<Value, CallError> {
        self.call_as(&Profile::default(), method, path, None, &[])
    }

    fn call_as(
        &self,
        profile: &Profile,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Value, CallError> {
        let (token, token_from) = self.token(profile);
        let mut client = Client::new(&self.url_with(profile), &self.trust(profile))?;
        if path.contains("/logs") {
            client = client.holding(OUTPUT_WAIT);
        }
        let (status, text) = client.request_with(token.as_deref(), method, path, body, headers)?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status < 400 {
            return Ok(value);
        }
        let error = serde_json::from_value::<ErrorBody>(value.clone());
        let message = error.map_or_else(|_| value.to_string(), |e| e.error);
        Err(if status == 401 {
            CallError::Unauthorized { message, token_from }
        } else {
            CallError::Refused { status, message }
        })
    }
}

/// `gantry login`: check that `server` answers `token` (its certificate checked against `ca`
/// when given, as every later command will), then save the three as the profile; where it
/// was saved.
pub fn login(
    server: &str,
    ca: Option<PathBuf>,
    token: Option<String>,
    token_file: Option<&std::path::Path>,
    insecure_http: bool,
) -> Result<PathBuf, CallError> {
    let token = match token_file {
        Some(file) => std::fs::read_to_string(file)
            .map_err(|e| crate::profile::ProfileError::Unreadable {
                path: file.display().to_string(),
                message: e.to_string(),
            })?
            .trim()
            .to_string(),
        None => token.or_else(|| std::env::var("GANTRY_TOKEN").ok()).ok_or(crate::profile::ProfileError::NoToken)?,
    };
    let token = token.as_str();
    let ca = match ca {
        Some(ca) => Some(std::fs::canonicalize(&ca).map_err(|e| crate::profile::ProfileError::Unreadable {
            path: ca.display().to_string(),
            message: format!("the CA file: {e}"),
        })?),
        None => None,
    };
    let connection = Connection {
        server: Some(server.into()),
        ca: ca.clone(),
        token: Some(token.into()),
        data: None,
        insecure_http,
    };
    connection.call_without_profile("GET", "/v1/partitions")?;
    let at = crate::profile::path().ok_or(crate::profile::ProfileError::Unwritable {
        path: "~/.config/gantry/client.toml".into(),
        message: "no $HOME, $XDG_CONFIG_HOME or $GANTRY_CONFIG to put it under".into(),
    })?;
    crate::profile::write(&at, &Profile { server: Some(server.into()), ca, token: Some(token.into()) })?;
    Ok(at)
}
