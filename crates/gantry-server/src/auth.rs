//! API tokens with roles: an admin (everything), a member of some queues (submit to, see and
//! cancel their jobs), read-only (see everything), agent (a node agent: register, heartbeat). Secrets are random 256-bit strings shown
//! once; the store keeps only their SHA-256 (a secret this long needs no slow hash). The
//! first start creates an `admin` token and writes its secret to `admin.token` (mode 0600)
//! in the data directory.

use crate::controller::ApiError;
use gantry_store::{Role, TokenRecord};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    pub queues: Vec<String>,
}

impl From<TokenRecord> for Principal {
    fn from(t: TokenRecord) -> Self {
        Principal { name: t.name, role: t.role, queues: t.queues }
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

    /// May it submit to or cancel in `queue`?
    pub fn acts_on(&self, queue: &str) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Member if self.queues.iter().any(|q| q == queue) => Ok(()),
            Role::Member => Err(ApiError::Forbidden(format!(
                "token {:?} is a member of {}, not of queue {queue:?}",
                self.name,
                if self.queues.is_empty() { "no queue".to_string() } else { self.queues.join(", ") }
            ))),
            Role::ReadOnly => Err(ApiError::Forbidden(format!("token {:?} is read-only", self.name))),
            Role::Agent => Err(ApiError::Forbidden(format!("token {:?} is an agent's", self.name))),
        }
    }

    /// Reads of the fleet's state (usage, metrics): any token but an agent's.
    pub fn not_agent(&self) -> Result<(), ApiError> {
        if self.role == Role::Agent {
            return Err(ApiError::Forbidden(format!("token {:?} is an agent's", self.name)));
        }
        Ok(())
    }

    /// Agent calls: for agent tokens (and admins, for tests and one-box setups).
    pub fn agent_only(&self, what: &str) -> Result<(), ApiError> {
        if matches!(self.role, Role::Agent | Role::Admin) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("{what} is for agent tokens; token {:?} is not one", self.name)))
        }
    }

    pub fn admin_only(&self, what: &str) -> Result<(), ApiError> {
        if self.role == Role::Admin {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("{what} is for admins; token {:?} is not one", self.name)))
        }
    }
}

/// Hex SHA-256 of a secret.
pub fn hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret: `gty_` and 64 hex digits from the kernel's random source.
pub fn new_secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom for a token: {e}"))?;
    Ok(format!("gty_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// The secret from an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Result<&str, ApiError> {
    let value = header.ok_or_else(|| {
        ApiError::Unauthorized(
            "missing token: send `Authorization: Bearer <token>` (gantry --token, $GANTRY_TOKEN)".into(),
        )
    })?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::Unauthorized("malformed Authorization header: expected `Bearer <token>`".into()))
}

/// Write the first admin secret where only this user can read it.
pub fn write_secret_file(path: &Path, secret: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    writeln!(file, "{secret}").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A token name: plain, short, printable.
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!("{name:?} is not a token name (letters, digits, - _ . @; at most 64)")))
    }
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
    fn bearer_headers_are_checked() {
        assert_eq!(bearer(Some("Bearer gty_1")).expect("valid"), "gty_1");
        for bad in [None, Some("Basic x"), Some("Bearer "), Some("gty_1")] {
            assert!(matches!(bearer(bad), Err(ApiError::Unauthorized(_))), "{bad:?}");
        }
    }

    #[test]
    fn roles_limit_what_a_token_does() {
        let member = Principal { name: "alice".into(), role: Role::Member, queues: vec!["research".into()] };
        assert!(member.sees("research") && !member.sees("prod"));
        assert!(member.acts_on("research").is_ok());
        let err = member.acts_on("prod").expect_err("not its queue").to_string();
        assert_eq!(err, "token \"alice\" is a member of research, not of queue \"prod\"");
        let reader = Principal { name: "ro".into(), role: Role::ReadOnly, queues: Vec::new() };
        assert!(reader.sees("prod") && reader.acts_on("prod").is_err() && reader.admin_only("tokens").is_err());
    }
}
