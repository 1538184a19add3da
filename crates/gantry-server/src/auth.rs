//! API tokens with roles: an admin (everything), a member of some queues (submit to, see and
//! cancel their jobs), read-only (see everything), agent (a node agent: register, heartbeat). Secrets are random 256-bit strings shown
//! once; the store keeps only their SHA-256 (a secret this long needs no slow hash). The
//! first start creates an `admin` token and writes its secret to `admin.token` (mode 0600)
//! in the data directory.

use crate::error::ControlError;
use gantry_store::{Role, TokenRecord};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Who is calling (recorded with each command in the command log, never the secret).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    pub queues: Vec<String>,
    /// An agent token's node (`TokenRecord::node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl From<TokenRecord> for Principal {
    fn from(t: TokenRecord) -> Self {
        Principal { name: t.name, role: t.role, queues: t.queues, node: t.node }
    }
}

impl Principal {
    /// May it see jobs of `queue`?
    pub fn sees(&self, queue: &str) -> bool {
        match self.role {
            Role::Admin | Role::ReadOnly => true,
            Role::Member => self.queues.iter().any(|q| q == queue),
            Role::Agent => false,
        }
    }

    /// May it read the task logs of a job of `user`? Only that user and admins: what a job
    /// prints is its user's (queue-mates and read-only tokens see the job, not its output).
    pub fn reads_logs_of(&self, user: &str) -> Result<(), ControlError> {
        if self.role == Role::Admin || (self.role == Role::Member && self.name == user) {
            return Ok(());
        }
        Err(ControlError::Forbidden(format!(
            "token {:?} may not read the logs of user {user:?}'s job: only its user and admins may",
            self.name
        )))
    }

    /// May it signal the processes of a job of `user` in `queue`? Admins, and that user as a
    /// member of the queue: a signal reaches into the job's processes, which are its user's.
    pub fn signals_job_of(&self, user: &str, queue: &str) -> Result<(), ControlError> {
        self.acts_on(queue)?;
        if self.role == Role::Admin || self.name == user {
            return Ok(());
        }
        Err(ControlError::Forbidden(format!(
            "token {:?} may not signal user {user:?}'s job: only its user and admins may",
            self.name
        )))
    }

    /// May it submit to or cancel in `queue`?
    pub fn acts_on(&self, queue: &str) -> Result<(), ControlError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Member if self.queues.iter().any(|q| q == queue) => Ok(()),
            Role::Member => Err(ControlError::Forbidden(format!(
                "token {:?} is a member of {}, not of queue {queue:?}",
                self.name,
                if self.queues.is_empty() { "no queue".to_string() } else { self.queues.join(", ") }
            ))),
            Role::ReadOnly => Err(ControlError::Forbidden(format!("token {:?} is read-only", self.name))),
            Role::Agent => Err(ControlError::Forbidden(format!("token {:?} is an agent's", self.name))),
        }
    }

    /// Reads of the fleet's state (usage, metrics): any token but an agent's.
    pub fn not_agent(&self) -> Result<(), ControlError> {
        if self.role == Role::Agent {
            return Err(ControlError::Forbidden(format!("token {:?} is an agent's", self.name)));
        }
        Ok(())
    }

    /// Agent calls: for agent tokens (and admins, for tests and one-box setups).
    pub fn agent_only(&self, what: &str) -> Result<(), ControlError> {
        if matches!(self.role, Role::Agent | Role::Admin) {
            Ok(())
        } else {
            Err(ControlError::Forbidden(format!("{what} is for agent tokens; token {:?} is not one", self.name)))
        }
    }

    /// May it act as `node`'s agent (register, heartbeat)? An admin may; an agent token only
    /// for the node it was created for.
    pub fn serves(&self, node: &str) -> Result<(), ControlError> {
        self.agent_only("an agent's registration and heartbeat")?;
        match (&self.role, &self.node) {
            (Role::Admin, _) => Ok(()),
            (_, Some(own)) if own == node => Ok(()),
            (_, Some(own)) => Err(ControlError::Forbidden(format!(
                "token {:?} is node {own:?}'s agent token; it cannot act for node {node:?}",
                self.name
            ))),
            (_, None) => Err(ControlError::Forbidden(format!(
                "token {:?} is not bound to a node; create one per node: gantry token create NAME --role agent --node {node}",
                self.name
            ))),
        }
    }

    pub fn admin_only(&self, what: &str) -> Result<(), ControlError> {
        if self.role == Role::Admin {
            Ok(())
        } else {
            Err(ControlError::Forbidden(format!("{what} is for admins; token {:?} is not one", self.name)))
        }
    }
}

impl Principal {
    /// `job` as this principal submits it: its user is the token's. A member (or anyone but
    /// an admin) naming another user is refused; an admin may submit on behalf of a user,
    /// recorded in `submitted_by`.
    pub fn stamp(&self, mut job: gantry_types::Job) -> Result<gantry_types::Job, ControlError> {
        match job.control.user.as_deref() {
            Some(user) if user != self.name && self.role == Role::Admin => {
                job.control.submitted_by = Some(self.name.clone());
            }
            Some(user) if user != self.name => {
                return Err(ControlError::Forbidden(format!(
                    "job {:?}: token {:?} submits as itself, not as user {user:?} (only an admin may submit on \
                     behalf of another user); leave `user` out",
                    job.name, self.name
                )));
            }
            _ => job.control.user = Some(self.name.clone()),
        }
        Ok(job)
    }

    /// The controller itself acting (the first admin token at the first start).
    pub fn controller() -> Principal {
        Principal { name: "controller".into(), role: Role::Admin, queues: Vec::new(), node: None }
    }
}

/// The tokens, kept in memory by hash (the store holds the same records; every change goes
/// through a command and is committed with it).
#[derive(Debug, Default)]
pub struct Tokens {
    by_name: BTreeMap<String, TokenRecord>,
    name_of_hash: BTreeMap<String, String>,
}

impl Tokens {
    /// Every token as stored (what a checkpoint's `open` entry keeps).
    pub fn records(&self) -> Vec<TokenRecord> {
        self.by_name.values().cloned().collect()
    }

    pub fn new(records: Vec<TokenRecord>) -> Tokens {
        let mut tokens = Tokens::default();
        for record in records {
            tokens.insert(record);
        }
        tokens
    }

    fn insert(&mut self, record: TokenRecord) {
        self.name_of_hash.insert(record.hash.clone(), record.name.clone());
        self.by_name.insert(record.name.clone(), record);
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Who holds this secret, at `now_s`? An expired token is refused like a revoked one, and
    /// says so (its holder knew it; the name is theirs).
    pub fn authenticate(&self, secret: &str, now_s: u64) -> Result<Principal, ControlError> {
        let token = self
            .name_of_hash
            .get(&hash(secret))
            .and_then(|name| self.by_name.get(name))
            .ok_or_else(|| ControlError::Unauthenticated("unknown or revoked token".into()))?;
        if let Some(expired) = token.expires_at_s.filter(|at| *at <= now_s) {
            return Err(ControlError::Unauthenticated(format!(
                "token {:?} expired at {} (Unix seconds); ask an admin for a new one",
                token.name, expired
            )));
        }
        Ok(Principal::from(token.clone()))
    }

    /// Check a new token (its secret already hashed) and add it; the record to commit.
    pub fn add(&mut self, record: TokenRecord) -> Result<TokenRecord, ControlError> {
        check_name(&record.name)?;
        if record.role == Role::Member && record.queues.is_empty() {
            return Err(token_field("queues", "a member token needs at least one queue"));
        }
        if record.role != Role::Member && !record.queues.is_empty() {
            return Err(token_field("queues", "queues apply to member tokens only"));
        }
        match (record.role, &record.node) {
            (Role::Agent, None) => {
                return Err(token_field(
                    "node",
                    "an agent token is for one node: give its node (gantry token create NAME --role agent --node NODE)",
                ));
            }
            (Role::Agent, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err(token_field("node", "a node applies to agent tokens only")),
        }
        if self.by_name.contains_key(&record.name) {
            return Err(ControlError::TokenExists(record.name));
        }
        if record.hash.len() != 64 || self.name_of_hash.contains_key(&record.hash) {
            return Err(token_field("hash", "a token's hash must be a new SHA-256"));
        }
        self.insert(record.clone());
        Ok(record)
    }

    /// Remove the token called `name`.
    pub fn revoke(&mut self, name: &str) -> Result<(), ControlError> {
        let record = self.by_name.remove(name).ok_or_else(|| ControlError::UnknownToken(name.into()))?;
        self.name_of_hash.remove(&record.hash);
        Ok(())
    }

    /// Every token, by name, without its hash.
    pub fn list(&self) -> Vec<TokenRecord> {
        self.by_name.values().map(|t| TokenRecord { hash: String::new(), ..t.clone() }).collect()
    }
}

/// The shortest lifetime a token may be given: less cannot be used before it lapses (a
/// client's clock and a request's round trip are seconds apart).
pub const TOKEN_LIFETIME_MIN_S: u64 = 60;
/// The longest: ten years, past which "expires" means "does not" (leave it out instead).
pub const TOKEN_LIFETIME_MAX_S: u64 = 10 * 365 * 86_400;

/// When a token created at `now_s` to live `lifetime_s` expires.
pub fn expiry(now_s: u64, lifetime_s: Option<u64>) -> Result<Option<u64>, ControlError> {
    let Some(lifetime) = lifetime_s else { return Ok(None) };
    if !(TOKEN_LIFETIME_MIN_S..=TOKEN_LIFETIME_MAX_S).contains(&lifetime) {
        return Err(token_field(
            "expires_in_s",
            format!(
                "a token's lifetime of {lifetime} s is outside {TOKEN_LIFETIME_MIN_S} s..={TOKEN_LIFETIME_MAX_S} s \
             (one minute to ten years); leave it out for a token that does not expire"
            ),
        ));
    }
    Ok(Some(now_s.saturating_add(lifetime)))
}

/// Hex SHA-256 of a secret.
pub fn hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret: `gty_` and 64 hex digits from the kernel's random source.
pub fn new_secret() -> Result<String, crate::error::ServeError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| crate::error::ServeError::Io(format!("cannot read /dev/urandom for a token: {e}")))?;
    Ok(format!("gty_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// The secret from an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Result<&str, ControlError> {
    let value = header.ok_or_else(|| {
        ControlError::Unauthenticated(
            "missing token: send `Authorization: Bearer <token>` (gantry --token, $GANTRY_TOKEN)".into(),
        )
    })?;
    // The scheme is case-insensitive (RFC 9110 §11.1): `bearer x` is as good as `Bearer x`.
    let secret = value.split_once(' ').filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")).map(|(_, t)| t);
    secret.map(str::trim).filter(|t| !t.is_empty()).ok_or_else(|| {
        ControlError::Unauthenticated("malformed Authorization header: expected `Bearer <token>`".into())
    })
}

/// Write the first admin secret where only this user can read it. The file appears whole or
/// not at all (written beside it, then renamed): a script or a test that waits for the file and
/// reads it at once never reads it empty or cut short.
pub fn write_secret_file(path: &Path, secret: &str) -> Result<(), crate::error::ServeError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |e: std::io::Error| crate::error::ServeError::Io(format!("cannot write {}: {e}", path.display()));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("secret");
    let partial = path.with_file_name(format!(".{name}.partial"));
    let _ = std::fs::remove_file(&partial);
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&partial).map_err(failed)?;
    writeln!(file, "{secret}").and_then(|()| file.sync_all()).map_err(failed)?;
    std::fs::rename(&partial, path).map_err(failed)
}

/// A token name: plain, short, printable.
pub fn check_name(name: &str) -> Result<(), ControlError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if ok {
        Ok(())
    } else {
        Err(token_field("name", format!("{name:?} is not a token name (letters, digits, - _ . @; at most 64)")))
    }
}

/// A token request's field that cannot be used.
fn token_field(field: &'static str, message: impl Into<String>) -> ControlError {
    ControlError::TokenField { field, message: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_hash_to_hex() {
        let (a, b) = (new_secret().expect("random"), new_secret().expect("random"));
        assert_ne!(a, b);
        assert_eq!((a.len(), &a[..4]), (68, "gty_"));
        assert_eq!(hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn the_secret_file_appears_whole_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("gantry-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("admin.token");
        // A partial file left by a crash mid-write does not stop the next start.
        std::fs::write(dir.join(".admin.token.partial"), "gty_cut").expect("stale partial");
        write_secret_file(&path, "gty_abc").expect("written");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "gty_abc\n");
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("admin.token")], "nothing left beside it");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn bearer_headers_are_checked() {
        assert_eq!(bearer(Some("Bearer gty_1")).expect("valid"), "gty_1");
        assert_eq!(bearer(Some("bearer gty_1")).expect("any case"), "gty_1");
        assert_eq!(bearer(Some("BEARER  gty_1")).expect("any case"), "gty_1");
        for bad in [None, Some("Basic x"), Some("Bearer "), Some("gty_1")] {
            assert!(matches!(bearer(bad), Err(ControlError::Unauthenticated(_))), "{bad:?}");
        }
    }

    #[test]
    fn roles_limit_what_a_token_does() {
        let member =
            Principal { name: "alice".into(), role: Role::Member, queues: vec!["research".into()], node: None };
        assert!(member.sees("research") && !member.sees("prod"));
        assert!(member.acts_on("research").is_ok());
        let err = member.acts_on("prod").expect_err("not its queue").to_string();
        assert_eq!(err, "token \"alice\" is a member of research, not of queue \"prod\"");
        let reader = Principal { name: "ro".into(), role: Role::ReadOnly, queues: Vec::new(), node: None };
        let rack = Principal { name: "rack".into(), role: Role::Agent, queues: Vec::new(), node: Some("n1".into()) };
        assert!(rack.serves("n1").is_ok());
        assert!(rack.serves("n2").expect_err("another node").to_string().contains("node \"n1\"'s agent token"));
        let legacy = Principal { node: None, ..rack.clone() };
        assert!(legacy.serves("n1").expect_err("unbound").to_string().contains("--node n1"));
        assert!(member.serves("n1").is_err() && Principal::controller().serves("n1").is_ok());
        assert!(reader.sees("prod") && reader.acts_on("prod").is_err() && reader.admin_only("tokens").is_err());
    }

    #[test]
    fn the_token_table_checks_names_hashes_and_revocation() {
        let record = |name: &str, secret: &str, role| TokenRecord {
            name: name.into(),
            role,
            queues: if role == Role::Member { vec!["q".into()] } else { Vec::new() },
            hash: hash(secret),
            created_at_s: 1,
            node: (role == Role::Agent).then(|| "n1".to_string()),
            expires_at_s: None,
        };
        let mut tokens = Tokens::new(vec![record("admin", "s0", Role::Admin)]);
        assert_eq!(tokens.authenticate("s0", 1).expect("known").role, Role::Admin);
        tokens.add(record("alice", "s1", Role::Member)).expect("adds");
        assert!(matches!(tokens.add(record("alice", "s2", Role::Admin)), Err(ControlError::TokenExists(_))));
        assert!(
            matches!(tokens.add(record("bob", "s1", Role::Admin)), Err(ControlError::TokenField { .. })),
            "same hash"
        );
        assert!(tokens.add(record("bad name", "s3", Role::Admin)).is_err());
        assert!(tokens.add(TokenRecord { queues: Vec::new(), ..record("m", "s4", Role::Member) }).is_err());
        assert!(tokens.add(TokenRecord { hash: "short".into(), ..record("h", "s5", Role::Admin) }).is_err());
        assert!(tokens.add(TokenRecord { node: None, ..record("a", "s6", Role::Agent) }).is_err(), "agent: one node");
        assert!(tokens.add(TokenRecord { node: Some("n1".into()), ..record("x", "s7", Role::Admin) }).is_err());
        tokens.add(record("rack", "s8", Role::Agent)).expect("an agent token for n1");
        assert_eq!(tokens.authenticate("s8", 1).expect("known").node.as_deref(), Some("n1"));
        tokens.revoke("alice").expect("revokes");
        assert!(matches!(tokens.authenticate("s1", 1), Err(ControlError::Unauthenticated(_))));
        assert!(matches!(tokens.revoke("alice"), Err(ControlError::UnknownToken(_))));
        assert_eq!(
            tokens.list().iter().map(|t| (t.name.as_str(), t.hash.as_str())).collect::<Vec<_>>(),
            [("admin", ""), ("rack", "")]
        );
    }

    #[test]
    fn a_token_works_until_it_expires_and_its_lifetime_is_bounded() {
        let temp = TokenRecord {
            name: "ci".into(),
            role: Role::ReadOnly,
            queues: Vec::new(),
            hash: hash("s1"),
            created_at_s: 1_000,
            node: None,
            expires_at_s: expiry(1_000, Some(3_600)).expect("an hour is fine"),
        };
        let tokens = Tokens::new(vec![temp]);
        assert_eq!(tokens.authenticate("s1", 4_599).expect("a second left").name, "ci");
        let refused = tokens.authenticate("s1", 4_600).expect_err("expired").to_string();
        assert!(refused.contains("\"ci\" expired at 4600") && refused.contains("ask an admin"), "{refused}");
        assert_eq!(expiry(5, None).expect("no lifetime"), None);
        for lifetime in [0, TOKEN_LIFETIME_MIN_S - 1, TOKEN_LIFETIME_MAX_S + 1, u64::MAX] {
            let err = expiry(5, Some(lifetime)).expect_err("out of bounds").to_string();
            assert!(err.contains("one minute to ten years"), "{err}");
        }
        assert_eq!(expiry(u64::MAX - 5, Some(TOKEN_LIFETIME_MAX_S)).expect("saturates"), Some(u64::MAX));
    }
}
