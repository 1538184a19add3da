//! MPS control daemons for MPS shares: one `nvidia-cuda-mps-control` per GPU with MPS
//! clients on this node, each with its own pipe directory (`<data>/mps/<GPU UUID>/`, logs in
//! its `log/`), started before the GPU's first client and stopped (`quit`) after its last.
//! Where the binary is not installed (no driver, the demo fleet) clients still get their MPS
//! variables and simply run without MPS, as the CUDA runtime does when no daemon answers.
//!
//! gantry never changes the GPU's compute mode; an admin who wants MPS clients only sets
//! `EXCLUSIVE_PROCESS` themselves.

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
    /// GPU UUID → running clients. Held while a daemon starts or stops, so a client never
    /// races its daemon's start.
    clients: Mutex<BTreeMap<String, u32>>,
}

/// `name` on `$PATH`, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

impl MpsDaemons {
    /// Daemons under `data_dir/mps/`, with the binary from `$PATH` if it is installed.
    pub fn new(data_dir: &Path) -> MpsDaemons {
        MpsDaemons { binary: on_path(BINARY), root: data_dir.join("mps"), clients: Mutex::default() }
    }

    /// The pipe directory of GPU `uuid`'s daemon (`CUDA_MPS_PIPE_DIRECTORY` for its clients).
    pub fn pipe_dir(&self, uuid: &str) -> PathBuf {
        self.root.join(uuid)
    }

    fn command(&self, binary: &Path, uuid: &str) -> tokio::process::Command {
        let pipe = self.pipe_dir(uuid);
        let mut cmd = tokio::process::Command::new(binary);
        cmd.env("CUDA_VISIBLE_DEVICES", uuid)
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", pipe.join("log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    }

    /// A client of GPU `uuid` is about to start: start its daemon if it is the first.
    /// Returns the pipe directory.
    pub async fn acquire(&self, uuid: &str) -> PathBuf {
        let pipe = self.pipe_dir(uuid);
        let mut clients = self.clients.lock().await;
        let count = clients.entry(uuid.to_string()).or_default();
        if *count == 0
            && let Some(binary) = &self.binary
        {
            if let Err(e) = std::fs::create_dir_all(pipe.join("log")) {
                tracing::warn!(gpu = uuid, error = %e, "cannot create the MPS pipe directory");
            }
            // `-d` forks the daemon and returns; one already running (from before a restart)
            // says so and exits non-zero, which is fine.
            match self.command(binary, uuid).arg("-d").output().await {
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

    /// A client of GPU `uuid` has exited: stop the daemon after its last.
    pub async fn release(&self, uuid: &str) {
        let mut clients = self.clients.lock().await;
        let Some(count) = clients.get_mut(uuid) else { return };
        *count = count.saturating_sub(1);
        if *count > 0 {
            return;
        }
        clients.remove(uuid);
        let Some(binary) = &self.binary else { return };
        let child = self.command(binary, uuid).stdin(Stdio::piped()).spawn();
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
