//! What `gantry serve` tells the operator, as text: the start-up banner (where the controller
//! listens, what it serves, how to reach it, who runs tasks, how to log in), its line about
//! TLS, and what it says when it waits to lead, steps down, leads again or stops. The binary
//! prints these; building them needs the controller's configuration and its running state.

use crate::settings::tls::TlsChosen;
use crate::supervise::Notice;
use crate::{Running, ServeConfig, StoreChoice};

/// What the start-up banner says beside what the running controller tells.
#[derive(Clone, Debug)]
pub struct Banner {
    /// The fleet's name: its file, "demo fleet", or this machine's GPUs.
    pub fleet_name: String,
    /// The line about TLS ([`tls_note`]).
    pub tls_note: String,
    /// The node agents run in this process (`serve --local`).
    pub local: bool,
}

impl Banner {
    /// The banner of the controller `running` from `config`, reached at `url`, with one line
    /// per confinement of its in-process agents. Lines, without a final line break.
    pub fn started(&self, config: &ServeConfig, running: &Running, url: &str, confinement_lines: &[String]) -> String {
        let data_dir = &config.data_dir;
        // The CLI finds this controller with no flags only where it listens and keeps its
        // data where the CLI looks by default; else the banner says what to set.
        let by_default = url == format!("https://{}", gantry_api::connection::DEFAULT_LISTEN)
            && gantry_api::connection::default_data_dir().is_some_and(|d| &d == data_dir);
        let mut lines = vec![
            format!(
                "gantry controller on {url} — {}, {}\n  submit: gantry submit FILE   watch: gantry queue   dashboard: {url}/ui   stop: Ctrl-C",
                self.fleet_name,
                state_line(config, running)
            ),
            self.tls_note.clone(),
            accounts_line(&config.accounts),
        ];
        if !by_default {
            lines.insert(
                1,
                format!(
                    "  the CLI reaches it with: export GANTRY_SERVER={url} GANTRY_DATA={}   (or once: gantry login {url} --token-file {})",
                    data_dir.display(),
                    data_dir.join("admin.token").display()
                ),
            );
        }
        lines.extend(confinement_lines.iter().cloned());
        if !self.local {
            lines.push(format!(
                "  remote agents: each node runs `gantry agent --server {url} --ca ca.pem --token-file FILE` (gantry token create NAME --role agent --node NODE)"
            ));
        }
        lines.push(format!(
            "  dashboard login: paste the admin token from {} at {url}/ui/login",
            data_dir.join("admin.token").display()
        ));
        if let Some(path) = &running.admin_token_file {
            lines.push(format!(
                "  created the admin token in {} (mode 0600){}",
                path.display(),
                if by_default { "; the CLI on this machine uses it by default" } else { "" }
            ));
        }
        lines.join("\n")
    }
}

/// Where the state is: the data directory, or the PostgreSQL store led (and the term).
fn state_line(config: &ServeConfig, running: &Running) -> String {
    let data_dir = &config.data_dir;
    match &config.store {
        StoreChoice::Sqlite => format!("data in {}", data_dir.display()),
        StoreChoice::Postgres { url, .. } => format!(
            "state in {} (leading, term {}), logs in {}",
            gantry_store::redact_url(url),
            running.term,
            data_dir.display()
        ),
    }
}

/// As whom tasks run: one user (not root), or each user's Unix account.
fn accounts_line(accounts: &crate::users::Accounts) -> String {
    match &accounts.single_user {
        Some(me) => {
            format!("  single-user mode (not root): every task runs as {me:?}; tokens only for user {me:?} (and admin)")
        }
        None => format!(
            "  tasks run as their user's Unix account on each node ([users] maps names; admin's own jobs: {:?})",
            accounts.account(crate::users::ADMIN)
        ),
    }
}

/// The banner's line about TLS.
pub fn tls_note(chosen: &TlsChosen) -> String {
    match chosen {
        TlsChosen::Plain { loopback } => {
            let place = if *loopback { "on loopback" } else { "ON THE NETWORK" };
            format!("  plain HTTP {place} (--insecure-http): tokens and jobs travel unencrypted")
        }
        TlsChosen::Operator { cert } => format!("  HTTPS with {}", cert.display()),
        TlsChosen::LocalCa { created, ca_file, fingerprint, names } => format!(
            "  HTTPS: {} {} (SHA-256 {fingerprint}); clients verify with it (--ca FILE, $GANTRY_CA; the CLI on this machine finds it)\n  certificate names: {}",
            if *created { "created the CA" } else { "CA" },
            ca_file.display(),
            names.join(", ")
        ),
    }
}

/// A standby's first line: it waits to lead the store at `store_url` (its password redacted).
pub fn standby_waiting(store_url: &str) -> String {
    format!(
        "standby: waiting to lead {} (takes over when the leader stops or its lease runs out)",
        gantry_store::redact_url(store_url)
    )
}

/// What the operator reads when the controller (serving `scheme`) steps down, leads again or
/// stops.
pub fn notice(scheme: &str, notice: &Notice) -> String {
    match notice {
        Notice::Stopping => "stopping (running tasks keep running; the next start re-adopts them)".to_string(),
        Notice::StoreFailed { why } => format!(
            "error: the store failed: {why}\nstopping: nothing this controller did since is lost (it was never acknowledged); restart it to recover from what was committed"
        ),
        Notice::SteppedDown { why, store, addr } => format!(
            "stepping down: {why}\n  rejoining as a standby of {store} on {addr} (no supervisor needed; Ctrl-C stops)"
        ),
        Notice::Leading { addr, store, term } => {
            format!("gantry controller on {scheme}://{addr} — state in {store} (leading, term {term}) again")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_line_says_what_was_chosen() {
        let plain = tls_note(&TlsChosen::Plain { loopback: false });
        assert_eq!(plain, "  plain HTTP ON THE NETWORK (--insecure-http): tokens and jobs travel unencrypted");
        let ca = tls_note(&TlsChosen::LocalCa {
            created: true,
            ca_file: "/d/ca.pem".into(),
            fingerprint: "AB:CD".into(),
            names: vec!["localhost".into(), "vm".into()],
        });
        assert!(ca.starts_with("  HTTPS: created the CA /d/ca.pem (SHA-256 AB:CD); clients verify"), "{ca}");
        assert!(ca.ends_with("\n  certificate names: localhost, vm"), "{ca}");
    }

    #[test]
    fn notices_name_the_store_and_the_address() {
        let addr: std::net::SocketAddr = "127.0.0.1:8177".parse().expect("an address");
        let leading = notice("https", &Notice::Leading { addr, store: "postgres://db/g".into(), term: 3 });
        assert_eq!(
            leading,
            "gantry controller on https://127.0.0.1:8177 — state in postgres://db/g (leading, term 3) again"
        );
        let down = notice("https", &Notice::SteppedDown { why: "lease lost".into(), store: "db".into(), addr });
        assert_eq!(down.lines().count(), 2);
    }
}
