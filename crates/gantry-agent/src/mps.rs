//! MPS control daemons for MPS shares: one `nvidia-cuda-mps-control` per GPU and Unix account
//! with MPS clients on this node, each with its own pipe directory, started before its first
//! client and stopped (`quit`) after its last. On a root agent each account's daemon runs as
//! that account in a directory only it can enter (`/run/gantry-mps/<agent>/<GPU>-<account>/`),
//! so one user's clients never reach another's server; as one user, under
//! `<data>/mps/<GPU UUID>/` (logs in its `log/`).
//! Where the binary is not installed (no driver, the demo fleet) clients still get their MPS
//! variables and simply run without MPS, as the CUDA runtime does when no daemon answers.
//!
//! gantry never changes the GPU's compute mode; an admin who wants MPS clients only sets
//! `EXCLUSIVE_PROCESS` themselves.

use crate::account::RunAs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

const BINARY: &str = "nvidia-cuda-mps-control";

/// The daemons this runner started, and their clients.
#[derive(Debug)]
pub struct MpsDaemons {
    binary: Option<PathBuf>,
    root: PathBuf,
    /// The per-account directories of a root agent: `/run/gantry-mps/<agent data dir name>`.
    accounts_root: PathBuf,
    /// (GPU UUID, account) → running clients. Held while a daemon starts or stops, so a
    /// client never races its daemon's start.
    clients: Mutex<BTreeMap<(String, String), u32>>,
}

/// `name` on `$PATH`, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

impl MpsDaemons {
    /// Daemons under `data_dir/mps/`, with the binary from `$PATH` if it is installed.
    pub fn new(data_dir: &Path) -> MpsDaemons {
        let agent = data_dir.file_name().map_or("agent".into(), |n| n.to_string_lossy().into_owned());
        MpsDaemons {
            binary: on_path(BINARY),
            root: data_dir.join("mps"),
            accounts_root: Path::new("/run/gantry-mps").join(agent),
            clients: Mutex::default(),
        }
    }

    /// The pipe directory of GPU `uuid`'s daemon for `account` (`CUDA_MPS_PIPE_DIRECTORY` for
    /// its clients).
    pub fn pipe_dir(&self, uuid: &str, account: &RunAs) -> PathBuf {
        match account {
            RunAs::Same => self.root.join(uuid),
            RunAs::Drop(user) => self.accounts_root.join(format!("{uuid}-{}", user.name)),
        }
    }

    /// Create the pipe directory: on a root agent, entered only by its account.
    fn make_pipe_dir(&self, pipe: &Path, account: &RunAs) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(pipe.join("log"))?;
        if let RunAs::Drop(user) = account {
            std::fs::set_permissions(&self.accounts_root, std::fs::Permissions::from_mode(0o711))?;
            for dir in [pipe.to_path_buf(), pipe.join("log")] {
                nix::unistd::chown(&dir, Some(user.uid), Some(user.gid))?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        Ok(())
    }

    fn command(&self, binary: &Path, uuid: &str, account: &RunAs) -> tokio::process::Command {
        let pipe = self.pipe_dir(uuid, account);
        let mut cmd = match account {
            RunAs::Same => tokio::process::Command::new(binary),
            RunAs::Drop(user) => {
                let mut cmd = tokio::process::Command::new(crate::account::SETPRIV);
                cmd.arg(format!("--reuid={}", user.uid))
                    .arg(format!("--regid={}", user.gid))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(binary);
                cmd
            }
        };
        cmd.env("CUDA_VISIBLE_DEVICES", uuid)
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", pipe.join("log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// A client of GPU `uuid` running as `account` is about to start: start their daemon if
    /// it is the first. Returns the pipe directory.
    pub async fn acquire(&self, uuid: &str, account: &RunAs) -> PathBuf {
        let pipe = self.pipe_dir(uuid, account);
        let mut clients = self.clients.lock().await;
        let count = clients.entry((uuid.to_string(), account.name().to_string())).or_default();
        if *count == 0
            && let Some(binary) = &self.binary
        {
            if let Err(e) = self.make_pipe_dir(&pipe, account) {
                tracing::warn!(gpu = uuid, error = %e, "cannot create the MPS pipe directory");
            }
            // `-d` forks the daemon and returns; one already running (from before a restart)
            // says so and exits non-zero, which is fine.
            match self.command(binary, uuid, account).arg("-d").output().await {
                Ok(out) if out.status.success() => tracing::info!(gpu = uuid, "MPS control daemon started"),
                Ok(out) => {
                    tracing::warn!(gpu = uuid, status = %out.status, stderr = %String::from_utf8_lossy(&out.stderr).trim(), "MPS control daemon did not start (clients run without MPS if none answers)")
                }
                Err(e) => tracing::warn!(gpu = uuid, error = %e, "cannot run nvidia-cuda-mps-control"),
            }
        }
        *count += 1;
        pipe
    }

    /// A client of GPU `uuid` running as `account` has exited: stop their daemon after its
    /// last.
    pub async fn release(&self, uuid: &str, account: &RunAs) {
        let mut clients = self.clients.lock().await;
        let key = (uuid.to_string(), account.name().to_string());
        let Some(count) = clients.get_mut(&key) else { return };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return;
        }
        clients.remove(&key);
        let Some(binary) = &self.binary else { return };
        let child = self.command(binary, uuid, account).stdin(Stdio::piped()).spawn();
        let quit = async {
            let mut child = child?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(b"quit\n").await?;
            }
            child.wait().await
        };
        match quit.await {
            Ok(status) if status.success() => tracing::info!(gpu = uuid, "MPS control daemon stopped"),
            Ok(status) => tracing::warn!(gpu = uuid, %status, "MPS control daemon quit failed"),
            Err(e) => tracing::warn!(gpu = uuid, error = %e, "cannot stop the MPS control daemon"),
        }
    }
}
