//! `gantry serve --config FILE`: the configuration file's schema and its checks. Every table
//! refuses keys it does not know; a value out of range is named with its field; relative
//! paths are taken from the file's folder. What the command line gives wins over the file
//! (the caller merges).

use super::{SettingsError, advertise_url};
use crate::admission::AdmissionLimits;
use crate::control::reconfig::ReconfigurePolicy;
use crate::idle::IdlePolicy;
use crate::meter::Billing;
use crate::retention::LogRetention;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole file; every key optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<std::net::SocketAddr>,
    pub store: Option<String>,
    pub standby: Option<bool>,
    pub advertise: Option<String>,
    pub insecure_http: Option<bool>,
    pub tls: Option<TlsFile>,
    pub data: Option<PathBuf>,
    pub fleet: Option<PathBuf>,
    pub queues: Option<PathBuf>,
    pub backfill: Option<String>,
    pub preempt: Option<bool>,
    pub kill_invalid_depend: Option<bool>,
    pub log_format: Option<String>,
    pub billing: Option<Billing>,
    pub idle: Option<IdlePolicy>,
    pub admission: Option<AdmissionLimits>,
    pub users: Option<BTreeMap<String, String>>,
    pub reconfigure: Option<ReconfigurePolicy>,
    pub log: Option<LogRetention>,
}

/// `[tls]`: what the --tls-* flags say.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub client_ca: Option<PathBuf>,
    #[serde(default)]
    pub names: Vec<String>,
    pub agent_certs: Option<String>,
}

/// Values a string field may take.
const CHOICES: [(&str, &[&str]); 2] = [("backfill", &["off", "greedy", "reserve"]), ("log_format", &["text", "json"])];

impl ConfigFile {
    /// Read, parse and check `path`; relative paths come back joined to its folder.
    pub fn read(path: &Path) -> Result<ConfigFile, SettingsError> {
        let at = || path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| SettingsError::Read { path: at(), error })?;
        let mut file: ConfigFile = toml::from_str(&text)
            .map_err(|e| SettingsError::Syntax { path: at(), message: e.message().to_string() })?;
        file.check().map_err(|(field, message)| SettingsError::Field { path: at(), field, message })?;
        file.resolve(path.parent().unwrap_or(Path::new("")));
        Ok(file)
    }

    /// The first field that cannot be used, and why; `advertise` comes back written as clients
    /// write their URLs.
    fn check(&mut self) -> Result<(), (&'static str, String)> {
        for (field, allowed) in CHOICES {
            let value = if field == "backfill" { &self.backfill } else { &self.log_format };
            if let Some(v) = value
                && !allowed.contains(&v.as_str())
            {
                return Err((field, format!("{field} = {v:?}: use one of {}", allowed.join(", "))));
            }
        }
        if let Some(url) = &self.advertise {
            let url = advertise_url(url).map_err(|e| ("advertise", format!("advertise = {e}")))?;
            self.advertise = Some(url);
        }
        if let Some(tls) = &self.tls {
            if tls.cert.is_some() != tls.key.is_some() {
                return Err(("tls", "[tls] needs both cert and key, or neither".into()));
            }
            if let Some(v) = &tls.agent_certs
                && !["optional", "required"].contains(&v.as_str())
            {
                return Err(("tls.agent_certs", format!("[tls] agent_certs = {v:?}: use optional or required")));
            }
        }
        self.check_tables()
    }

    /// The tables' own checks (prices, idle thresholds, limits, guards, retention).
    fn check_tables(&self) -> Result<(), (&'static str, String)> {
        let named = |field: &'static str| move |e: crate::error::ServeError| (field, e.to_string());
        self.billing.as_ref().map(Billing::check).transpose().map_err(named("billing"))?;
        self.idle.as_ref().map(IdlePolicy::check).transpose().map_err(named("idle"))?;
        self.admission.as_ref().map(AdmissionLimits::check).transpose().map_err(named("admission"))?;
        self.reconfigure.as_ref().map(ReconfigurePolicy::check).transpose().map_err(|e| ("reconfigure", e.message))?;
        self.log.as_ref().map(LogRetention::check).transpose().map_err(named("log"))?;
        Ok(())
    }

    /// Paths relative to the file's folder `base`.
    fn resolve(&mut self, base: &Path) {
        let relative = |p: &mut Option<PathBuf>| {
            if let Some(path) = p.take() {
                *p = Some(if path.is_absolute() { path } else { base.join(path) });
            }
        };
        for path in [&mut self.data, &mut self.fleet, &mut self.queues] {
            relative(path);
        }
        if let Some(tls) = &mut self.tls {
            for path in [&mut tls.cert, &mut tls.key, &mut tls.client_ca] {
                relative(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str, text: &str) -> Result<ConfigFile, SettingsError> {
        let dir = std::env::temp_dir().join(format!("gantry-settings-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("gantry.toml");
        std::fs::write(&path, text).expect("write");
        let read = ConfigFile::read(&path);
        std::fs::remove_dir_all(&dir).ok();
        read
    }

    #[test]
    fn relative_paths_are_taken_from_the_files_folder() {
        let file = read(
            "paths",
            "fleet = \"fleet.toml\"\ndata = \"/var/lib/gantry\"\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        )
        .expect("valid");
        assert!(
            file.fleet
                .expect("fleet")
                .ends_with("gantry-settings-".to_string() + &std::process::id().to_string() + "-paths/fleet.toml")
        );
        assert_eq!(file.data, Some(PathBuf::from("/var/lib/gantry")));
        assert!(file.tls.expect("tls").key.expect("key").is_absolute());
    }

    #[test]
    fn each_bad_field_is_named_and_nothing_is_taken() {
        let cases = [
            ("backfill = \"eager\"", "backfill", "use one of off, greedy, reserve"),
            ("log_format = \"xml\"", "log_format", "use one of text, json"),
            ("advertise = \"ctl:8177\"", "advertise", "advertise = "),
            ("[tls]\ncert = \"c.pem\"", "tls", "needs both cert and key"),
            ("[tls]\nagent_certs = \"always\"", "tls.agent_certs", "use optional or required"),
        ];
        for (text, want_field, want) in cases {
            match read(want_field, text) {
                Err(SettingsError::Field { field, message, .. }) => {
                    assert_eq!(field, want_field, "{text}");
                    assert!(message.contains(want), "{text}: {message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(read("unknown", "listen_on = 1"), Err(SettingsError::Syntax { .. })));
        assert!(matches!(read("syntax", "listen = ["), Err(SettingsError::Syntax { .. })));
    }
}
