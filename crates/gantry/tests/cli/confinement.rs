//! Confinement seen from outside, with the real binary (issue 35): a controller started from
//! a terminal, holding a descriptor open, runs a task that tries TIOCSTI on that terminal and
//! lists what it inherited; as a user who is not root, `serve --local` and `gantry agent` still
//! run and say plainly that they are unconfined.

use super::{ServeGuard, stderr, stdout, temp_dir};
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `script` (util-linux) runs `command` under a new pseudo-terminal, which becomes its
/// controlling terminal; what is written to the terminal comes out on `script`'s stdout,
/// collected here.
fn under_a_terminal(command: &str) -> (TerminalGuard, std::sync::mpsc::Receiver<String>) {
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid_file = std::env::temp_dir().join(format!("gantry-tty-{}-{n}.pid", std::process::id()));
    // The command's own pid (a `gantry serve` it execs keeps it), for the guard to kill:
    // killing `script` alone leaves what runs under the terminal behind.
    let command = format!("echo $$ > {}; {command}", pid_file.display());
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("script (util-linux) runs");
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                break;
            }
        }
    });
    (TerminalGuard { script: ServeGuard(child), pid_file }, rx)
}

/// `script` and the command it runs under the terminal, both killed when dropped.
struct TerminalGuard {
    script: ServeGuard,
    pid_file: PathBuf,
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.pid_file) {
            let _ = std::process::Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
        let _ = std::fs::remove_file(&self.pid_file);
        let _ = self.script.0.kill();
    }
}

/// Everything received so far, waiting up to `limit` for `needle`.
fn read_until(rx: &std::sync::mpsc::Receiver<String>, seen: &mut String, needle: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(text) => seen.push_str(&text),
            Err(_) => return false,
        }
    }
    true
}

/// A perl one-liner that pushes `text` into `/dev/tty` with TIOCSTI, then tries descriptors
/// 0–2, printing each attempt's outcome ("pushed" only where it worked).
fn tiocsti(text: &str) -> String {
    let perl = r#"my $s = "TEXT"; if (open(my $t, "<", "/dev/tty")) { my $ok = 1; for (split //, $s) { $ok &&= ioctl($t, 0x5412, $_) } print $ok ? "pushed into /dev/tty\n" : "/dev/tty refused: $!\n" } else { print "/dev/tty: $!\n" } for my $fd (0, 1, 2) { open(my $h, "<&=", $fd) or next; my $c = "x"; print "fd $fd: ", (ioctl($h, 0x5412, $c) ? "pushed" : "refused: $!"), "\n" }"#;
    format!("perl -e '{}'", perl.replace("TEXT", text))
}

#[test]
fn a_task_cannot_reach_the_controllers_terminal_nor_its_descriptors() {
    let dir = temp_dir("confine-tty");
    let data = dir.join("data");
    let secret = dir.join("held-open");
    std::fs::write(&secret, "a descriptor the controller holds").expect("file");
    // The check itself can fail: a process that does keep the terminal pushes input into it,
    // which the terminal echoes (unless this kernel refuses TIOCSTI to everyone).
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "1");
    if legacy {
        let (_guard, rx) = under_a_terminal(&format!("{}; sleep 1", tiocsti("CONTROL-INJECTED")));
        let mut seen = String::new();
        assert!(
            read_until(&rx, &mut seen, "CONTROL-INJECTED", Duration::from_secs(10)),
            "TIOCSTI under a terminal: {seen}"
        );
    }
    // The controller under a terminal, with descriptor 9 open (not close-on-exec).
    let gantry = env!("CARGO_BIN_EXE_gantry");
    let command = format!(
        "exec 9<{}; exec {gantry} serve --local --insecure-http --listen 127.0.0.1:0 --data {}",
        secret.display(),
        data.display()
    );
    let (_server, rx) = under_a_terminal(&command);
    let mut seen = String::new();
    assert!(read_until(&rx, &mut seen, "dashboard login", Duration::from_secs(60)), "{seen}");
    let url = seen.split_whitespace().find(|w| w.starts_with("http://")).expect("its address").to_string();
    let token = std::fs::read_to_string(data.join("admin.token")).expect("token").trim().to_string();
    let job = dir.join("job.toml");
    // What a child of the task inherits is what the task was given (`ls` of its own
    // /proc/self/fd would list the descriptor it reads the directory through). Looked at once
    // the child runs `sleep`: until then it is the shell, which opens /dev/null as descriptor
    // 3 to make it the background job's stdin.
    let script = format!(
        "{}; sleep 3 & until readlink /proc/$!/exe | grep -q sleep; do :; done; echo \"fds $(ls /proc/$!/fd | tr '\\n' ' ')\"; echo \"tty_nr $(cut -d' ' -f7 /proc/$$/stat)\"; kill $!",
        tiocsti("INJECTED-BY-TASK")
    );
    std::fs::write(&job, format!("[[job]]\nname = \"tty\"\ncommand = {script:?}\n")).expect("job");
    let submitted =
        super::gantry(&["submit", job.to_str().expect("utf-8"), "--wait", "--server", &url, "--token", &token]);
    assert_eq!(submitted.status.code(), Some(0), "{}", stderr(&submitted));
    let logs = stdout(&super::gantry(&["logs", "1", "--server", &url, "--token", &token]));
    assert!(logs.contains("/dev/tty: No such device or address"), "the task has no controlling terminal: {logs}");
    assert!(!logs.contains("pushed"), "{logs}");
    for fd in 0..3 {
        assert!(logs.contains(&format!("fd {fd}: refused: Inappropriate ioctl for device")), "{logs}");
    }
    assert!(logs.contains("tty_nr 0"), "{logs}");
    assert!(logs.contains("fds 0 1 2 \n"), "only stdin, stdout and stderr reach a task: {logs}");
    // Whatever it tried, nothing reached the terminal.
    read_until(&rx, &mut seen, "never-printed", Duration::from_millis(500));
    assert!(!seen.contains("INJECTED-BY-TASK"), "{seen}");
}

/// A Unix account made for one test and removed after.
struct TestUser(String);

impl TestUser {
    fn new(tag: &str) -> TestUser {
        let name = format!("gt{tag}{}", std::process::id() % 100_000);
        let _ = std::process::Command::new("userdel").args(["-r", &name]).output();
        let out = std::process::Command::new("useradd").args(["-m", "-s", "/bin/sh", &name]).output().expect("useradd");
        assert!(out.status.success(), "useradd {name}: {}", String::from_utf8_lossy(&out.stderr));
        TestUser(name)
    }

    fn ids(&self) -> (nix::unistd::Uid, nix::unistd::Gid) {
        let user = nix::unistd::User::from_name(&self.0).expect("lookup").expect("exists");
        (user.uid, user.gid)
    }

    /// `gantry args…` run as this user (HOME its own), a copy of the binary anyone may run.
    fn gantry(&self, binary: &std::path::Path, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid", &self.0, "--regid", &self.0, "--init-groups", "--"])
            .arg(binary)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", format!("/home/{}", self.0));
        cmd
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel").args(["-r", &self.0]).output();
    }
}

/// Read a child's stderr until a line holds `needle` (its banner), then keep draining it.
fn banner(child: &mut std::process::Child, needle: &str) -> String {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut all = String::new();
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("stderr") > 0, "ended before {needle:?}: {all}");
        all.push_str(&line);
        if line.contains(needle) {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    all
}

#[test]
fn as_a_user_serve_local_and_an_agent_run_unconfined_and_say_so() {
    if !is_root() {
        eprintln!("skipped: making a test user needs root (CI runs as root)");
        return;
    }
    let user = TestUser::new("uc");
    let (uid, gid) = user.ids();
    // A place the user owns, with a copy of the binary it may run.
    let home = std::env::temp_dir().join(format!("gantry-unconfined-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("dir");
    let binary = home.join("gantry");
    std::fs::copy(env!("CARGO_BIN_EXE_gantry"), &binary).expect("copy");
    nix::unistd::chown(&home, Some(uid), Some(gid)).expect("chown");
    let data = home.join("data");
    let args =
        ["serve", "--local", "--insecure-http", "--listen", "127.0.0.1:0", "--data", data.to_str().expect("utf-8")];
    let mut child = user.gantry(&binary, &args).stderr(std::process::Stdio::piped()).spawn().expect("starts");
    let said = banner(&mut child, "dashboard login");
    let _server = ServeGuard(child);
    assert!(said.contains("confinement: UNCONFINED"), "{said}");
    assert!(said.contains("the agent is not root"), "{said}");
    let url =
        said.split_whitespace().find(|w| w.starts_with("http://")).expect("address").trim_end_matches(',').to_string();
    let token = std::fs::read_to_string(data.join("admin.token")).expect("token").trim().to_string();
    let cli = |args: &[&str]| {
        let mut all = vec![args[0], "--server", url.as_str(), "--token", token.as_str()];
        all.extend(&args[1..]);
        super::gantry(&all)
    };
    let nodes = stdout(&cli(&["nodes"]));
    assert!(
        nodes.contains("UNCONFINED") && nodes.contains("confinement: unconfined: the agent is not root"),
        "{nodes}"
    );
    let job = home.join("job.toml");
    std::fs::write(&job, "[[job]]\nname = \"mine\"\ncommand = \"id -un\"\n").expect("job");
    let done = cli(&["submit", job.to_str().expect("utf-8"), "--wait"]);
    assert_eq!(done.status.code(), Some(0), "{}", stderr(&done));
    assert!(stdout(&cli(&["logs", "1"])).contains(&user.0), "it still runs, as the user");
    let show = stdout(&cli(&["show", "1"]));
    assert!(show.contains("[unconfined: the agent is not root"), "the job's record says so: {show}");
    // A remote agent run by the user, for a root controller's node: the same.
    let fleet = home.join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"32GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n",
    )
    .expect("fleet");
    let controller_data = temp_dir("confine-remote").join("controller");
    let controller_args = [
        "serve",
        "--fleet",
        fleet.to_str().expect("utf-8"),
        "--data",
        controller_data.to_str().expect("utf-8"),
        "--listen",
        "127.0.0.1:0",
    ];
    let (_controller, remote) = super::spawn(&controller_args);
    let admin = std::fs::read_to_string(controller_data.join("admin.token")).expect("token").trim().to_string();
    let made = super::gantry(&[
        "token", "create", "n1-agent", "--role", "agent", "--node", "n1", "--server", &remote, "--token", &admin,
    ]);
    let token_file = home.join("n1.token");
    std::fs::write(&token_file, stdout(&made).lines().next().expect("secret").trim()).expect("token file");
    nix::unistd::chown(&token_file, Some(uid), Some(gid)).expect("chown");
    let agent_data = home.join("agent");
    let agent_args = [
        "agent",
        "--server",
        remote.as_str(),
        "--token-file",
        token_file.to_str().expect("utf-8"),
        "--inventory",
        fleet.to_str().expect("utf-8"),
        "--data",
        agent_data.to_str().expect("utf-8"),
    ];
    let mut agent = user.gantry(&binary, &agent_args).stderr(std::process::Stdio::piped()).spawn().expect("starts");
    let said = banner(&mut agent, "confinement:");
    let _agent = ServeGuard(agent);
    assert!(said.contains("confinement: UNCONFINED") && said.contains("the agent is not root"), "{said}");
    let registered = || stdout(&super::gantry(&["nodes", "--server", &remote, "--token", &admin]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !registered().contains("confinement:") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let nodes = registered();
    assert!(nodes.contains("UNCONFINED") && nodes.contains("unconfined: the agent is not root"), "{nodes}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn confinement_flags_refuse_what_they_cannot_mean() {
    let cases: [(&[&str], &str); 5] = [
        (&["agent", "--confinement", "sideways"], "use auto, cgroup-v1, cgroup-v2 or off"),
        (&["agent", "--pids-per-task", "3"], "16..=4194304"),
        (&["serve", "--fleet", "x.toml", "--confinement", "off"], "are for the agents of --local"),
        (&["serve", "--local", "--memory-unasked", "lots", "--listen", "127.0.0.1:0"], "--memory-unasked"),
        (&["serve", "--local", "--cpu-unasked", "0", "--listen", "127.0.0.1:0"], "above 0, or unlimited"),
    ];
    for (args, said) in cases {
        let out = super::gantry(args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(stderr(&out).contains(said), "{args:?}: {}", stderr(&out));
    }
}
