//! A private PostgreSQL server for tests: `initdb` in a temporary directory, `postgres` on a
//! free loopback port with trust authentication for one user, stopped (fast shutdown) and
//! removed when dropped. No system service, no mock. As root (CI runs the suite as root, and
//! `initdb` refuses to), the server runs as `nobody`.
//!
//! `initdb` and `postgres` are found on `PATH`, else in Debian's `/usr/lib/postgresql/<version>/bin`;
//! `tools/install-test-deps.sh` installs them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections after it was started.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running private server.
#[derive(Debug)]
pub struct TestPostgres {
    child: Child,
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    /// Whether it serves TLS (and only TLS, over TCP).
    tls: bool,
}

/// Why the test PostgreSQL could not be set up, started or used.
#[derive(Debug, thiserror::Error)]
pub enum TestPostgresError {
    /// No `initdb` here: `tools/install-test-deps.sh` installs PostgreSQL.
    #[error("{0}")]
    NotInstalled(String),
    /// A step failed (making its directory, initdb, starting the server, waiting for it,
    /// creating a database); the message says which.
    #[error("{0}")]
    Step(String),
}

impl From<String> for TestPostgresError {
    fn from(message: String) -> Self {
        TestPostgresError::Step(message)
    }
}

/// Where `initdb`, `postgres` and `pg_isready` are.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("postgres").is_file() {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): run tools/install-test-deps.sh"
            .to_string()
    })
}

/// A command run as `nobody` when this process is root, else as this user.
fn as_server_user(program: &Path) -> Command {
    if nix_is_root() {
        let mut command = Command::new("setpriv");
        command.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn nix_is_root() -> bool {
    // SAFETY-free: read our own effective uid from /proc (no libc call needed).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        .unwrap_or(false)
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

impl TestPostgres {
    /// initdb and start a server under a new temporary directory named after `name`.
    pub fn start(name: &str) -> Result<TestPostgres, TestPostgresError> {
        Self::start_with(name, None)
    }

    /// [`TestPostgres::start`] serving TLS with `cert` and `key` (PEM), and refusing plain TCP
    /// connections (`hostnossl … reject`); the tests' own setup connects over its Unix socket.
    pub fn start_tls(name: &str, cert: &str, key: &str) -> Result<TestPostgres, TestPostgresError> {
        Self::start_with(name, Some((cert, key)))
    }

    fn start_with(name: &str, tls: Option<(&str, &str)>) -> Result<TestPostgres, TestPostgresError> {
        let bin = bin_dir().map_err(TestPostgresError::NotInstalled)?;
        let dir = std::env::temp_dir().join(format!("gantry-pg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let data = dir.join("data");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if nix_is_root() {
            let status =
                Command::new("chown").args(["nobody:nogroup"]).arg(&dir).status().map_err(|e| format!("chown: {e}"))?;
            if !status.success() {
                return Err(format!("cannot give {} to nobody", dir.display()).into());
            }
        }
        let out = as_server_user(&bin.join("initdb"))
            .args(["--auth=trust", "--username=gantry", "--encoding=UTF8", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        if let Some((cert, key)) = tls {
            serve_tls_only(&data, cert, key)?;
        }
        let port = free_port()?;
        let child = Self::spawn(&bin, &dir, port, tls.is_some())?;
        let server = TestPostgres { child, dir, port, bin, tls: tls.is_some() };
        server.wait_ready()?;
        Ok(server)
    }

    fn spawn(bin: &Path, dir: &Path, port: u16, tls: bool) -> Result<Child, String> {
        as_server_user(&bin.join("postgres"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(if tls { &["-c", "ssl=on"][..] } else { &[] })
            .arg("-k")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("postgres: {e}"))
    }

    /// Stop the server (fast shutdown: every connection ends) and start it again on the same
    /// data and port: what a database failover or restart looks like to its clients.
    pub fn restart(&mut self) -> Result<(), TestPostgresError> {
        self.stop();
        self.child = Self::spawn(&self.bin, &self.dir, self.port, self.tls)?;
        Ok(self.wait_ready()?)
    }

    fn stop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (disconnect clients, stop at once).
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < READY_WITHIN {
            match postgres::Client::connect(&self.socket_url("postgres"), postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the test PostgreSQL on port {} did not become ready in {READY_WITHIN:?}: {last}", self.port))
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for database `db` (created by [`TestPostgres::create_database`]).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://gantry@127.0.0.1:{}/{db}", self.port)
    }

    /// Database `db` over the server's Unix socket (what its TLS-only TCP port refuses).
    pub fn socket_url(&self, db: &str) -> String {
        format!("host={} port={} user=gantry dbname={db}", self.dir.display(), self.port)
    }

    /// Create an empty database `db` and return its URL.
    pub fn create_database(&self, db: &str) -> Result<String, TestPostgresError> {
        let mut client = postgres::Client::connect(&self.socket_url("postgres"), postgres::NoTls)
            .map_err(|e| format!("connect: {e}"))?;
        client.batch_execute(&format!("CREATE DATABASE \"{db}\"")).map_err(|e| format!("create {db}: {e}"))?;
        Ok(self.url(db))
    }
}

/// Give the server its certificate and key, and let TCP clients in over TLS only.
fn serve_tls_only(data: &Path, cert: &str, key: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let write = |name: &str, text: &str| -> Result<(), String> {
        let path = data.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if nix_is_root() {
            let status =
                Command::new("chown").args(["nobody:nogroup"]).arg(&path).status().map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("cannot give {} to nobody", path.display()));
            }
        }
        Ok(())
    };
    write("server.crt", cert)?;
    write("server.key", key)?;
    write(
        "pg_hba.conf",
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
    )
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
