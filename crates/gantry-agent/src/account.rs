//! Which Unix account a task runs as on this node. An agent running as root (the production
//! case) runs each task as the account the controller names for the job's user — its uid,
//! primary gid and supplementary groups from this node's passwd and group databases, like
//! Slurm — through `setpriv` (util-linux, see [`crate::spawn`]); a job whose account does
//! not exist here is refused before anything starts. An agent that is not root can only run tasks as itself, and refuses
//! other accounts' tasks rather than run them under the wrong user.

use crate::error::TaskRefused;
use std::path::{Path, PathBuf};

/// The program that drops to the task's account: sets the real and effective uid and gid and
/// the account's supplementary groups (initgroups), then execs the task.
pub const SETPRIV: &str = "setpriv";

/// The `PATH` a task gets on a root agent (a clean environment; the job's `env` may set
/// another).
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Who this agent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Root: tasks run as their accounts.
    Root,
    /// One user (by name; `None` if it has no passwd entry): only its own tasks.
    User(Option<String>),
}

impl Identity {
    pub fn of_this_process() -> Identity {
        let euid = nix::unistd::geteuid();
        if euid.is_root() {
            return Identity::Root;
        }
        Identity::User(nix::unistd::User::from_uid(euid).ok().flatten().map(|u| u.name))
    }
}

/// A task's account, as this node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: nix::unistd::Uid,
    pub gid: nix::unistd::Gid,
    pub home: PathBuf,
    pub shell: PathBuf,
}

impl Account {
    /// Where a task without a `workdir` starts: its account's home, else `/`.
    pub fn default_workdir(&self) -> String {
        if self.home.is_dir() { self.home.display().to_string() } else { "/".into() }
    }
}

/// How a task runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// As this agent's own user (it is the task's account, or the account is root).
    Same,
    /// Dropped to another account.
    Drop(Account),
}

impl RunAs {
    /// The account's name when dropped to one; empty for the agent's own user.
    pub fn name(&self) -> &str {
        match self {
            RunAs::Same => "",
            RunAs::Drop(user) => &user.name,
        }
    }

    /// The environment a task starts from, before the job's variables: its account's
    /// basics (on a root agent), or this agent's `PATH`, `HOME` and user (as itself).
    pub fn basic_env(&self) -> Vec<(String, String)> {
        match self {
            RunAs::Drop(user) => vec![
                ("PATH".into(), SYSTEM_PATH.into()),
                ("HOME".into(), user.home.display().to_string()),
                ("USER".into(), user.name.clone()),
                ("LOGNAME".into(), user.name.clone()),
                ("SHELL".into(), user.shell.display().to_string()),
            ],
            RunAs::Same => ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TMPDIR"]
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .chain(std::env::var("PATH").is_err().then(|| ("PATH".to_string(), SYSTEM_PATH.to_string())))
                .collect(),
        }
    }
}

/// How a task for `account` runs on this node, or why it cannot.
pub fn resolve(identity: &Identity, account: &str, node: &str) -> Result<RunAs, TaskRefused> {
    let refused = |message: String| TaskRefused::Account { account: account.to_string(), message };
    match identity {
        Identity::User(me) => {
            if account.is_empty() || me.as_deref() == Some(account) {
                return Ok(RunAs::Same);
            }
            let me = me.as_deref().unwrap_or("a user without a passwd entry");
            Err(refused(format!(
                "the agent on node {node} runs as {me:?}, not root: it runs only {me:?}'s tasks, not Unix account {account:?}'s \
                 (run the agent as root to serve several users)"
            )))
        }
        Identity::Root => {
            if account.is_empty() {
                let message = "the controller named no Unix account for this task (is it older than this agent?)";
                return Err(refused(message.into()));
            }
            let user = nix::unistd::User::from_name(account)
                .map_err(|e| refused(format!("looking up Unix account {account:?} on node {node}: {e}")))?
                .ok_or_else(|| {
                    refused(format!(
                        "no Unix account {account:?} on node {node}: create it there, or map the job's user to an \
                         existing account in the controller's [users]"
                    ))
                })?;
            if user.uid.is_root() {
                return Ok(RunAs::Same);
            }
            Ok(RunAs::Drop(Account {
                name: user.name,
                uid: user.uid,
                gid: user.gid,
                home: user.dir,
                shell: user.shell,
            }))
        }
    }
}

/// Is `setpriv` installed (a root agent needs it to run anyone's tasks)?
pub fn setpriv_installed() -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(SETPRIV).is_file())).unwrap_or(false)
        || Path::new("/usr/bin/setpriv").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_runs_only_its_own_tasks() {
        let me = Identity::User(Some("alice".into()));
        assert_eq!(resolve(&me, "alice", "n1"), Ok(RunAs::Same));
        assert_eq!(resolve(&me, "", "n1"), Ok(RunAs::Same));
        let refused = resolve(&me, "bob", "n1").expect_err("another account");
        assert!(refused.to_string().contains("runs only \"alice\"'s tasks"), "{refused}");
    }

    #[test]
    fn a_root_agent_refuses_accounts_the_node_lacks_and_runs_root_as_itself() {
        let refused = resolve(&Identity::Root, "no-such-user-gantry", "n1").expect_err("absent");
        assert!(refused.to_string().contains("no Unix account \"no-such-user-gantry\" on node n1"), "{refused}");
        assert!(resolve(&Identity::Root, "", "n1").is_err());
        assert_eq!(resolve(&Identity::Root, "root", "n1"), Ok(RunAs::Same));
    }
}
