//! The client profile: which controller the CLI talks to, the CA it checks that controller
//! against and the token it sends, saved by `gantry login` so that a user on any machine
//! reaches their controller without flags or variables. It sits between the environment and
//! the data directory: a flag beats `$GANTRY_*`, which beats the profile, which beats what
//! `gantry serve --local` left in this machine's data directory.
//!
//! File: `$GANTRY_CONFIG`, else `$XDG_CONFIG_HOME/gantry/client.toml`, else
//! `~/.config/gantry/client.toml`; TOML with `server`, `ca` and `token`; written mode 0600
//! (it holds a token).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a profile says; each field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// A profile that could not be read or written.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{path}: {message}\n  hint: fix or remove it, or run `gantry login URL` again")]
    Unreadable { path: String, message: String },
    #[error("cannot write {path}: {message}")]
    Unwritable { path: String, message: String },
    #[error("no token to log in with\n  hint: give --token-file FILE, --token TOKEN or $GANTRY_TOKEN")]
    NoToken,
}

/// Where the profile lives (`None` without `$HOME` and the variables).
pub fn path() -> Option<PathBuf> {
    if let Some(file) = std::env::var_os("GANTRY_CONFIG") {
        return Some(PathBuf::from(file));
    }
    // XDG's base directories: $XDG_CONFIG_HOME when it is an absolute path, else ~/.config.
    if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(xdg.join("gantry/client.toml"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config/gantry/client.toml"))
}

/// The profile at `at`: none when the file does not exist; an error when it does and does not
/// read (a broken profile is said, not silently skipped for another controller).
pub fn read(at: &Path) -> Result<Option<Profile>, ProfileError> {
    let text = match std::fs::read_to_string(at) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ProfileError::Unreadable { path: at.display().to_string(), message: e.to_string() }),
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| ProfileError::Unreadable { path: at.display().to_string(), message: e.to_string() })
}

/// The profile in effect (see [`path`]), read once per process: a command that polls (`submit
/// --wait`, `logs -f`) calls the controller many times.
pub fn current() -> Result<Option<Profile>, ProfileError> {
    static CURRENT: std::sync::OnceLock<Result<Option<Profile>, ProfileError>> = std::sync::OnceLock::new();
    CURRENT.get_or_init(|| path().map_or(Ok(None), |p| read(&p))).clone()
}

/// Write `profile` to `at` (directories made), readable by its owner only.
pub fn write(at: &Path, profile: &Profile) -> Result<(), ProfileError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail =
        |e: &dyn std::fmt::Display| ProfileError::Unwritable { path: at.display().to_string(), message: e.to_string() };
    if let Some(dir) = at.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
    }
    let text = toml::to_string(profile).map_err(|e| fail(&e))?;
    let temp = at.with_extension("toml.new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| fail(&e))?;
    file.write_all(format!("# written by gantry login\n{text}").as_bytes()).map_err(|e| fail(&e))?;
    std::fs::rename(&temp, at).map_err(|e| fail(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_round_trips_privately_and_a_broken_one_is_said() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gantry-profile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let at = dir.join("gantry/client.toml");
        assert_eq!(read(&at).expect("absent"), None);
        let profile = Profile {
            server: Some("https://ctl:8177".into()),
            ca: Some("/etc/ca.pem".into()),
            token: Some("gty_x".into()),
        };
        write(&at, &profile).expect("writes");
        assert_eq!(read(&at).expect("reads"), Some(profile));
        assert_eq!(std::fs::metadata(&at).expect("file").permissions().mode() & 0o777, 0o600);
        std::fs::write(&at, "server = 3\n").expect("breaks");
        assert!(read(&at).expect_err("broken").to_string().contains("client.toml"));
        std::fs::write(&at, "colour = \"red\"\n").expect("unknown field");
        assert!(read(&at).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
