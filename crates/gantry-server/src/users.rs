//! Which Unix account runs a job's tasks. On a shared fleet the agents run as root and each
//! task runs as its job's user's account (like Slurm); `[users]` in the configuration maps a
//! gantry user to another account name. A controller that is not root (`serve --local` on a
//! laptop) is single-user: every task runs as the account that started it, and only that
//! user (and admins) may have tokens or jobs — a second user would otherwise run as the first.

use crate::error::ControlError;
use crate::error::FieldError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The admin token's user name (created at the first start).
pub const ADMIN: &str = "admin";

/// Longest Unix account name accepted in `[users]` (Linux's useradd allows 32).
const ACCOUNT_CHARS_MAX: usize = 32;

/// The account every task runs as, or the map from gantry users to accounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounts {
    /// gantry user → Unix account (`[users]`); a user not in it runs as the account of the
    /// same name.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
    /// Single-user mode: every task runs as this account; only this user and admins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_user: Option<String>,
}

/// The Unix account this process runs as, by name (`None` if it has no passwd entry).
pub fn this_account() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name)
}

/// Is `name` usable as a Unix account name (what useradd accepts, and nothing a shell or a
/// path would read differently)?
pub fn check_account_name(name: &str) -> Result<(), FieldError> {
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if name.is_empty() || name.len() > ACCOUNT_CHARS_MAX || !ok_chars || name.starts_with('-') {
        return Err(FieldError::new(
            "account",
            format!(
                "{name:?} is not a Unix account name (1 to {ACCOUNT_CHARS_MAX} of letters, digits, '.', '_', '-', not starting with '-')"
            ),
        ));
    }
    Ok(())
}

impl Accounts {
    /// For this process: root serves many users (`map`, with the admin's own jobs running as
    /// root's account unless mapped); anyone else is single-user.
    pub fn for_this_process(map: BTreeMap<String, String>) -> Result<Accounts, FieldError> {
        for (user, account) in &map {
            check_account_name(account)
                .map_err(|e| FieldError::new(format!("users.{user}"), format!("[users] {user} = {e}")))?;
        }
        let me = this_account().ok_or_else(|| FieldError::new("user", "this process's user has no passwd entry"))?;
        if !nix::unistd::geteuid().is_root() {
            return Ok(Accounts { map, single_user: Some(me) });
        }
        let mut map = map;
        map.entry(ADMIN.to_string()).or_insert(me);
        Ok(Accounts { map, single_user: None })
    }

    /// The account `user`'s tasks run as.
    pub fn account(&self, user: &str) -> String {
        match &self.single_user {
            Some(account) => account.clone(),
            None => self.map.get(user).cloned().unwrap_or_else(|| user.to_string()),
        }
    }

    /// May `user` have a token or jobs here? In single-user mode only its user and the admin;
    /// never a non-admin user whose tasks would run as root.
    pub fn allows(&self, user: &str) -> Result<(), ControlError> {
        if let Some(only) = &self.single_user
            && user != only
            && user != ADMIN
        {
            return Err(ControlError::request(
                "user",
                format!(
                    "this controller is single-user (it does not run as root): every task runs as {only:?}, so it \
                 serves only user {only:?} (and admin), not {user:?}; run `gantry serve` as root for several users"
                ),
            ));
        }
        if user != ADMIN && self.single_user.is_none() && self.account(user) == "root" {
            return Err(ControlError::request(
                "user",
                format!(
                    "user {user:?} would run tasks as root: give it another name, or map it to another account in [users]"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_come_from_the_map_or_the_name_and_root_is_never_a_members() {
        let many = Accounts { map: [("alice".into(), "a1".into())].into(), single_user: None };
        assert_eq!((many.account("alice"), many.account("bob")), ("a1".into(), "bob".into()));
        assert!(many.allows("bob").is_ok());
        assert!(many.allows("root").expect_err("root").to_string().contains("as root"));
        let one = Accounts { map: Default::default(), single_user: Some("me".into()) };
        assert_eq!(one.account("anyone"), "me");
        assert!(one.allows("me").is_ok() && one.allows(ADMIN).is_ok());
        assert!(one.allows("bob").expect_err("single").to_string().contains("single-user"));
    }

    #[test]
    fn account_names_are_checked() {
        for good in ["alice", "svc-gpu", "a.b_c", "u1"] {
            assert!(check_account_name(good).is_ok(), "{good}");
        }
        for bad in ["", "-x", "a b", "a/b", "a:b", &"x".repeat(33), "é"] {
            assert!(check_account_name(bad).is_err(), "{bad}");
        }
    }
}
