//! The controller's settings as an operator gives them (`gantry serve`'s flags and its
//! `--config` file), checked here so a typo fails at start with the file, the field and what
//! to write instead, never as a controller that runs with something else: the configuration
//! file's schema ([`file`]), the store a URL names, the address standbys advertise, the TLS
//! the controller serves ([`tls`]), the reconfiguration policy, the demo's prices.

pub mod file;
pub mod tls;

use crate::StoreChoice;
use crate::control::reconfig::{ReconfigureMode, ReconfigurePolicy};
use crate::error::FieldError;
use gantry_store::StoreError;

/// A setting that cannot be used: nothing started.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read config {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The file is not TOML, or has a key the schema does not (the message says which).
    #[error("{path}: {message}")]
    Syntax { path: String, message: String },
    /// A field's value is out of range or names something that does not exist.
    #[error("{path}: {message}")]
    Field { path: String, field: &'static str, message: String },
    /// A flag (or its environment variable) that cannot be used; `hint` says what to give.
    #[error("{flag}: {message}")]
    Flag { flag: &'static str, message: String },
    /// The data directory (or its CA) cannot be made or read.
    #[error("{path}: {message}")]
    DataDir { path: String, message: String },
    /// Two settings that cannot go together.
    #[error("{0}")]
    Conflict(&'static str),
}

/// The longest `--advertise` URL: a standby sends it in a header.
pub const ADVERTISE_LEN_MAX: usize = 256;

/// `--advertise`: written as clients write `--server` (so a client recognises it among its
/// URLs), and short printable ASCII (a standby sends it in a header).
pub fn advertise_url(text: &str) -> Result<String, FieldError> {
    let url = gantry_wire::client::base_url(text).map_err(|e| FieldError::new("advertise", e.to_string()))?;
    if url.len() > ADVERTISE_LEN_MAX || !url.bytes().all(|b| b.is_ascii_graphic()) {
        let message =
            format!("{text:?}: give http(s)://HOST:PORT in at most {ADVERTISE_LEN_MAX} printable ASCII characters");
        return Err(FieldError::new("advertise", message));
    }
    Ok(url)
}

/// `--store URL` (or $GANTRY_STORE) and `--standby`, checked: its TLS options now, so a typo
/// is an error at start and not a standby that waits for ever.
pub fn store_choice(url: Option<String>, standby: bool) -> Result<StoreChoice, SettingsError> {
    let flag = "--store";
    match url {
        None if standby => {
            Err(SettingsError::Conflict("--standby needs a PostgreSQL --store (SQLite has one controller)"))
        }
        None => Ok(StoreChoice::Sqlite),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let refused = |e: StoreError| SettingsError::Flag {
                flag,
                message: match e {
                    StoreError::Backend(why) => why,
                    e => e.to_string(),
                },
            };
            let (tls, _) = gantry_store::pg_tls::TlsOptions::split(&url).map_err(refused)?;
            tls.connector().map_err(refused)?;
            Ok(StoreChoice::Postgres { url, standby })
        }
        Some(url) => Err(SettingsError::Flag {
            flag,
            message: format!(
                "{:?}: give a PostgreSQL URL (postgres://user:password@host:port/database); without --store the state is SQLite in the data directory",
                gantry_store::redact_url(&url)
            ),
        }),
    }
}

/// The reconfiguration policy: `[reconfigure]`'s guards (`file`), its mode unless `mode`
/// (`--reconfigure`: off, advise or auto) says otherwise; the demo reconfigures by itself
/// (auto, every 30 s, so a waiting MIG job is served within its first minute) unless told
/// otherwise.
pub fn reconfigure_policy(
    file: Option<ReconfigurePolicy>,
    mode: Option<&str>,
    demo: bool,
) -> Result<ReconfigurePolicy, SettingsError> {
    let mut policy = file.unwrap_or_else(|| match demo {
        true => ReconfigurePolicy { mode: ReconfigureMode::Auto, period_s: 30, ..ReconfigurePolicy::default() },
        false => ReconfigurePolicy::default(),
    });
    if let Some(mode) = mode {
        policy.mode = match mode {
            "off" => ReconfigureMode::Off,
            "auto" => ReconfigureMode::Auto,
            "advise" => ReconfigureMode::Advise,
            other => {
                let message = format!("{other:?}: use off, advise or auto");
                return Err(SettingsError::Flag { flag: "--reconfigure", message });
            }
        };
    }
    policy.check().map_err(|e| SettingsError::Flag { flag: "[reconfigure]", message: e.message })?;
    Ok(policy)
}

/// The demo's prices without a `[billing]`: example list prices, so the chargeback has
/// dollars in it ($/GPU-hour: H100 4.00, A100 2.50, L4 0.80).
pub fn demo_billing() -> crate::meter::Billing {
    let prices = [("H100-SXM5-80GB", 4.0), ("A100-SXM4-80GB", 2.5), ("L4-24GB", 0.8)];
    crate::meter::Billing {
        price_per_gpu_hour: prices.iter().map(|(m, p)| (m.to_string(), *p)).collect(),
        weights: Default::default(),
    }
}

/// The scheduler's settings from the queue tree (`None`: one FIFO queue), `--backfill` (off,
/// greedy or reserve, the default), `--preempt` and whether a job whose dependency can never
/// be met stays pending (not with `--kill-invalid-depend`).
pub fn scheduling(
    queues: Option<gantry_types::QueueTree>,
    backfill: Option<&str>,
    preempt: bool,
    keep_unsatisfiable: bool,
) -> gantry_engine::sched::SchedulerConfig {
    use gantry_engine::sched::{Backfill, Order, SchedulerConfig};
    SchedulerConfig {
        order: queues.map_or(Order::Fifo, Order::FairShare),
        backfill: backfill.and_then(Backfill::parse).unwrap_or(Backfill::Reserve),
        reserve_depth: 1,
        preempt,
        keep_unsatisfiable,
    }
}

/// Say so when the open-file limit is below what `agents` remote agents' connections need
/// (each keeps one open, two for a moment when a task ends while its heartbeat is held).
pub fn check_open_files(limit: Result<u64, crate::error::ServeError>, agents: usize) {
    let needed = 2 * agents as u64 + crate::OPEN_FILES_BESIDE_AGENTS;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_url_is_written_as_clients_write_theirs() {
        assert_eq!(advertise_url("https://ctl-a.example:8177/").ok().as_deref(), Some("https://ctl-a.example:8177"));
        for bad in ["ctl-a:8177", "https://ctl-a:8177/v1", "https://u@ctl-a:1", "https://contrôle:1", "https://a b:1"]
        {
            assert!(advertise_url(bad).is_err(), "{bad}");
        }
        assert!(advertise_url(&format!("https://{}:1", "a".repeat(300))).is_err());
    }

    #[test]
    fn a_store_url_is_postgres_or_refused_by_name_and_standby_needs_one() {
        assert_eq!(store_choice(None, false).expect("sqlite"), StoreChoice::Sqlite);
        assert!(matches!(store_choice(None, true), Err(SettingsError::Conflict(_))));
        let err = store_choice(Some("mysql://u:secret@h/db".into()), false).expect_err("not postgres");
        assert!(err.to_string().starts_with("--store: ") && !err.to_string().contains("secret"), "{err}");
        let err = store_choice(Some("postgres://h/db?sslmode=sometimes".into()), true).expect_err("bad sslmode");
        assert!(err.to_string().contains("sslmode"), "{err}");
    }

    #[test]
    fn the_demo_reconfigures_by_itself_unless_told_otherwise() {
        assert_eq!(reconfigure_policy(None, None, true).expect("demo").mode, ReconfigureMode::Auto);
        assert_eq!(reconfigure_policy(None, Some("off"), true).expect("off").mode, ReconfigureMode::Off);
        assert_eq!(reconfigure_policy(None, None, false).expect("default").mode, ReconfigureMode::Advise);
        assert!(reconfigure_policy(None, Some("sometimes"), false).is_err());
    }
}
