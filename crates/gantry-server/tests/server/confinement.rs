//! A job gets what it was granted on its node and nothing else, tried as a hostile tenant
//! against a running controller with its in-process agents (issue 35): a task group name
//! made of `../` and planted symlinks and FIFOs; processes that detach to outlive their job
//! (`setsid`, double forks, `nohup`) through completion, cancel, a time limit and a restart;
//! a task allocating twice its memory; a fork bomb; a task opening GPUs it was not granted;
//! another user looking for a job's secrets in `/proc`. Each attempt is refused or contained,
//! nothing else on the node is touched, and the controller keeps serving.
//!
//! Confinement needs root (CI runs as root): without it these tests say so and check
//! nothing. They run on this machine's cgroup v1 controllers (the default, `auto`), and the
//! v2 path on its unified mount as far as that mount allows (tracking, kill, devices).

use crate::isolation::{TestUser, is_root, logs, member};
use crate::{FLEET, Server};
use gantry_types::JobState;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn data_dir(tag: &str) -> PathBuf {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-confine-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    data
}

/// A local controller whose agents confine as `confine` says, and the guard that cleans up
/// after it.
fn confined_server(tag: &str, confine: gantry_server::local_agents::LocalConfinement) -> Option<(Server, Sweep)> {
    if !is_root() {
        eprintln!("skipped: confinement needs root (CI runs as root)");
        return None;
    }
    let local = gantry_server::control::Agents::Local;
    let server =
        Server::start_config(data_dir(tag), Default::default(), FLEET, local, move |c| c.confinement = confine);
    let sweep = Sweep(server.data.clone());
    Some((server, sweep))
}

fn default_server(tag: &str) -> Option<(Server, Sweep)> {
    confined_server(tag, Default::default())
}

/// Kills whatever a test's agents left running and removes their cgroups: a test that fails
/// midway leaves its jobs' tasks (a fork bomb among them) with nobody to stop them. Dropped
/// before the server (declared after it).
struct Sweep(PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        let nodes = std::fs::read_dir(self.0.join("nodes")).into_iter().flatten().flatten();
        for node in nodes {
            let Ok(id) = std::fs::read_to_string(node.path().join("agent.id")) else { continue };
            let name = format!("{}-{}", node.file_name().to_string_lossy(), &id.trim()[..8]);
            let mounts = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten();
            for mount in mounts {
                let root = mount.path().join("gantry").join(&name);
                kill_below(&root);
                remove_below(&root);
            }
        }
    }
}

fn kill_below(dir: &Path) {
    for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    for child in std::fs::read_dir(dir).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
        kill_below(&child.path());
    }
}

fn remove_below(dir: &Path) {
    for child in std::fs::read_dir(dir).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
        remove_below(&child.path());
    }
    for _ in 0..20 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A number no other process on the machine sleeps for: `prefix` then this test process's id.
fn marker(prefix: u32) -> String {
    format!("{prefix}{:05}", std::process::id() % 100_000)
}

/// Processes whose command line is `sleep <marker>`.
fn sleepers(marker: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .collect()
}

/// Wait up to `limit` for `done`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// The cgroup v1 directory of run `job`/`attempt` on node n1 under `controller`.
fn run_cgroup(server: &Server, controller: &str, job: u64, attempt: u32) -> PathBuf {
    let instance = std::fs::read_to_string(server.data.join("nodes/n1/agent.id")).expect("agent id");
    Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(format!("gantry/n1-{}", &instance.trim()[..8]))
        .join(format!("job-{job}-{attempt}"))
}

/// The job's log (admin), once it has some.
fn log_of(server: &Server, id: u64) -> String {
    logs(server, &server.token, id).1
}

#[test]
fn a_task_group_name_never_becomes_a_path_and_planted_files_are_refused() {
    let Some((server, _sweep)) = default_server("names") else { return };
    // The attacker's directory outside the job's, with a symlink and a FIFO where a name
    // made path would land.
    let outside = std::env::temp_dir().join(format!("gantry-pwn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).expect("dir");
    let victim = outside.join("victim");
    std::fs::write(&victim, "untouched").expect("victim");
    std::os::unix::fs::symlink(&victim, outside.join("x-0.out")).expect("symlink");
    nix::unistd::mkfifo(&outside.join("x-0.err"), nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    // A second name aims at the controller's admin token, for the logs API to read back.
    let admin_token = server.data.join("admin.token");
    std::os::unix::fs::symlink(&admin_token, outside.join("y-0.out")).expect("symlink");
    let traversal = |name: &str| format!("../../../../../../../../..{}/{name}", outside.display());
    let body = format!(
        "[[job]]\nname = \"t\"\ncommand = \"echo made-by-task\"\n[[job.task]]\nname = {:?}\n[[job.task]]\nname = {:?}\n",
        traversal("x"),
        traversal("y")
    );
    let id = server.submit(&body)[0];
    server.wait_for(id, JobState::Completed);
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "untouched");
    assert_eq!(std::fs::read_to_string(&admin_token).expect("token").trim(), server.token, "the token untouched");
    let mut names: Vec<String> =
        std::fs::read_dir(&outside).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
    names.sort();
    assert_eq!(names, ["victim", "x-0.err", "x-0.out", "y-0.out"], "nothing made outside the job's directory");
    assert!(!log_of(&server, id).contains(&server.token), "the logs API reads the tasks' own files only");
    assert_eq!(
        std::fs::read_to_string(server.data.join(format!("nodes/n1/jobs/{id}/0/0.out"))).expect("by rank"),
        "made-by-task\n"
    );
    assert!(log_of(&server, id).contains("made-by-task"));
    // A symlink and a FIFO where the task's own files go (planted while it is held: in a
    // directory only root can write, this is the last line of defence): the task is refused,
    // the agent and the controller go on, the target is untouched.
    let held = server.submit("[[job]]\nname = \"held\"\nhold = true\ncommand = \"echo never\"\n")[0];
    let dir = server.data.join(format!("nodes/n1/jobs/{held}/0"));
    std::fs::create_dir_all(&dir).expect("run dir");
    std::os::unix::fs::symlink(&victim, dir.join("0.out")).expect("symlink");
    nix::unistd::mkfifo(&dir.join("0.err"), nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    assert_eq!(server.call("POST", &format!("/v1/jobs/{held}/release"), None).0, 200);
    let ended = server.wait_for(held, JobState::Failed);
    assert_eq!(ended["exit_code"], 126, "{ended}");
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "untouched");
    // The logs API does not block on the FIFO nor follow the symlink.
    let started = Instant::now();
    let text = log_of(&server, held);
    assert!(started.elapsed() < Duration::from_secs(5), "the logs API answered at once");
    assert!(!text.contains("untouched"), "{text}");
    let after = server.submit("[[job]]\nname = \"after\"\ncommand = \"echo still-serving\"\n")[0];
    server.wait_for(after, JobState::Completed);
    server.stop();
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn nothing_a_task_starts_outlives_its_job() {
    let Some((server, _sweep)) = default_server("escape") else { return };
    let (detached, forked, nohup) = (marker(71), marker(72), marker(73));
    // Completed: its main process exits while three others detach.
    let script = format!(
        "setsid sleep {detached} & (sleep {forked} &) ; nohup sleep {nohup} >/dev/null 2>&1 & sleep 1; echo main-done"
    );
    let id = server.submit(&format!("[[job]]\nname = \"escape\"\ncommand = {script:?}\n"))[0];
    assert!(eventually(Duration::from_secs(10), || !sleepers(&detached).is_empty()), "the escapees started");
    let seen = sleepers(&detached);
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(seen[0]))).expect("sid");
    assert_eq!(sid.as_raw(), seen[0], "it left the task's session");
    server.wait_for(id, JobState::Completed);
    for m in [&detached, &forked, &nohup] {
        assert!(sleepers(m).is_empty(), "sleep {m} outlived its completed job");
    }
    assert!(!run_cgroup(&server, "freezer", id, 0).exists(), "the run's cgroup is gone");
    // Cancelled, and stopped at its time limit: the same.
    let cancel_m = marker(74);
    let id = server
        .submit(&format!("[[job]]\nname = \"c\"\ngrace = 1\ncommand = \"setsid sleep {cancel_m} & sleep 600\"\n"))[0];
    assert!(eventually(Duration::from_secs(10), || !sleepers(&cancel_m).is_empty()));
    assert_eq!(server.call("DELETE", &format!("/v1/jobs/{id}"), None).0, 200);
    server.wait_for(id, JobState::Cancelled);
    assert!(sleepers(&cancel_m).is_empty(), "a detached process of a cancelled job survived");
    let limit_m = marker(75);
    let body =
        format!("[[job]]\nname = \"l\"\ntime_limit = 1\ngrace = 1\ncommand = \"setsid sleep {limit_m} & sleep 600\"\n");
    let id = server.submit(&body)[0];
    let ended = server.wait_for(id, JobState::Failed);
    assert_eq!(ended["ending"], "timed-out", "{ended}");
    assert!(sleepers(&limit_m).is_empty(), "a detached process of a timed-out job survived");
    server.stop();
}

#[test]
fn a_restarted_controller_readopts_the_cgroup_and_still_kills_everything() {
    let Some((server, _sweep)) = default_server("readopt") else { return };
    let m = marker(76);
    let id =
        server.submit(&format!("[[job]]\nname = \"r\"\ngrace = 1\ncommand = \"setsid sleep {m} & sleep 600\"\n"))[0];
    assert!(eventually(Duration::from_secs(10), || !sleepers(&m).is_empty()));
    let data = server.stop();
    let server = Server::start_in(data);
    assert_eq!(server.state(id).0, JobState::Running, "re-adopted, not started again");
    assert_eq!(sleepers(&m).len(), 1, "nothing started twice");
    assert_eq!(server.call("DELETE", &format!("/v1/jobs/{id}"), None).0, 200);
    server.wait_for(id, JobState::Cancelled);
    assert!(sleepers(&m).is_empty(), "the detached process of a re-adopted task survived its cancel");
    assert!(eventually(Duration::from_secs(5), || !run_cgroup(&server, "memory", id, 0).exists()));
    server.stop();
}

#[test]
fn a_task_over_its_memory_is_ended_by_the_oom_killer_and_says_so() {
    let Some((server, _sweep)) = default_server("oom") else { return };
    let hog =
        "[[job]]\nname = \"hog\"\nmemory = \"64MiB\"\ncommand = \"dd if=/dev/zero of=/dev/null bs=128M count=1\"\n";
    let id = server.submit(hog)[0];
    let neighbour = server.submit("[[job]]\nname = \"n\"\ncommand = \"echo neighbour-fine\"\n")[0];
    let ended = server.wait_for(id, JobState::Failed);
    assert_eq!(ended["ending"], "oom", "{ended}");
    assert_eq!(ended["oom"]["node"], "n1", "{ended}");
    assert_eq!(ended["oom"]["group"], "main", "{ended}");
    assert_eq!(ended["oom"]["memory_limit_bytes"], 64 << 20, "{ended}");
    let used = &ended["used"][0];
    assert_eq!(used["node"], "n1", "{ended}");
    assert!(used["memory_peak_bytes"].as_u64().is_some_and(|p| p <= (64 << 20) + (1 << 20)), "{ended}");
    server.wait_for(neighbour, JobState::Completed);
    assert!(log_of(&server, neighbour).contains("neighbour-fine"));
    server.stop();
}

#[test]
fn a_fork_bomb_stays_inside_its_job() {
    let confine = gantry_server::local_agents::LocalConfinement {
        choice: Default::default(),
        defaults: gantry_agent::runner::Defaults { pids_per_task: 64, ..Default::default() },
    };
    let Some((server, _sweep)) = confined_server("bomb", confine) else { return };
    // The bomb in the background, the task itself waiting (so a refused fork does not end it).
    let bomb =
        "[[job]]\nname = \"bomb\"\nmemory = \"256MiB\"\ngrace = 1\ncommand = \"b() { b | b & }; b & exec sleep 600\"\n";
    let id = server.submit(bomb)[0];
    server.wait_for(id, JobState::Running);
    let pids = run_cgroup(&server, "pids", id, 0);
    let read = |file: &str| std::fs::read_to_string(pids.join(file)).unwrap_or_default();
    // Forks past the limit are refused: the shell says so in the task's log.
    assert!(
        eventually(Duration::from_secs(10), || log_of(&server, id).contains("Cannot fork")),
        "{}",
        log_of(&server, id)
    );
    let peak =
        read("pids.peak").trim().parse::<u64>().or_else(|_| read("pids.current").trim().parse()).unwrap_or(u64::MAX);
    assert!(peak <= 64, "the bomb held {peak} processes at once, its limit is 64");
    // The node still starts and runs others' work meanwhile.
    let other = server.submit("[[job]]\nname = \"other\"\ncommand = \"echo still-forking-fine\"\n")[0];
    server.wait_for(other, JobState::Completed);
    assert_eq!(server.call("DELETE", &format!("/v1/jobs/{id}"), None).0, 200);
    server.wait_for(id, JobState::Cancelled);
    assert!(eventually(Duration::from_secs(5), || !pids.exists()), "the bomb's cgroup emptied and went");
    server.stop();
}

/// Which GPU index of n1 the job's task holds.
fn granted_index(job: &Value) -> u64 {
    job["tasks"][0]["placement"]["gpus"][0]["gpu"].as_u64().expect("a whole GPU")
}

#[test]
fn a_task_opens_only_the_gpus_it_was_granted() {
    let Some((server, _sweep)) = default_server("devices") else { return };
    let dev = server.data.join("nodes/n1/dev");
    if gantry_agent::cgroup::devices::registered_major("nvidia").is_some() {
        eprintln!("skipped: an NVIDIA driver holds major 195 here, so no fake GPU devices are made");
        server.stop();
        return;
    }
    assert!(dev.join("nvidia0").exists() && dev.join("nvidia1").exists(), "the simulated node's fake GPUs");
    // Opening each GPU node, the control node, and a GPU node it makes itself (root may
    // mknod; the cgroup still decides the open).
    let script = format!(
        "for d in {d}/nvidia0 {d}/nvidia1 {d}/nvidiactl /dev/null; do (exec 3<\"$d\" && echo \"$d: opened\") 2>&1; done; \
         mknod /tmp/gantry-own-{p} c 195 1 2>&1 && (exec 3</tmp/gantry-own-{p}) 2>&1; rm -f /tmp/gantry-own-{p}",
        d = dev.display(),
        p = std::process::id()
    );
    let id = server.submit(&format!("[[job]]\nname = \"gpu\"\ngpu = {{ count = 1 }}\ncommand = {script:?}\n"))[0];
    let ended = server.wait_for(id, JobState::Completed);
    let mine = granted_index(&ended);
    let text = log_of(&server, id);
    let line = |what: &str| text.lines().find(|l| l.contains(what)).unwrap_or_default().to_string();
    assert!(line(&format!("nvidia{mine}")).contains("No such device or address"), "its own GPU passes: {text}");
    assert!(line(&format!("nvidia{}", 1 - mine)).contains("Operation not permitted"), "another is refused: {text}");
    assert!(line("nvidiactl").contains("No such device or address"), "{text}");
    assert!(line("/dev/null").contains("opened"), "{text}");
    if mine == 0 {
        assert!(line(&format!("gantry-own-{}", std::process::id())).contains("Operation not permitted"), "{text}");
    }
    let (_, shown) = server.call("GET", &format!("/v1/jobs/{id}"), None);
    assert!(shown["tasks"][0]["confinement"].as_str().is_some_and(|c| c.starts_with("cgroup v1 (")), "{shown}");
    server.stop();
}

#[test]
fn a_jobs_environment_is_in_no_processs_arguments_and_other_users_cannot_read_it() {
    let Some((server, _sweep)) = default_server("environ") else { return };
    let (alice, bob) = (TestUser::new("ea"), TestUser::new("eb"));
    let alice_token = member(&server, &alice.0);
    let nonce = format!("s3cret-{}", std::process::id());
    let body = format!(
        "[[job]]\nname = \"env\"\nenv = {{ API_KEY = \"{nonce}\" }}\ncommand = \"echo has-$API_KEY; sleep 3\"\n"
    );
    let (status, reply) = server.call_as(Some(&alice_token), "POST", "/v1/jobs", Some(&body));
    assert_eq!(status, 201, "{reply}");
    let id = reply["ids"][0].as_u64().expect("id");
    server.wait_for(id, JobState::Running);
    let holders = |file: &str| -> Vec<i32> {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/{file}")).is_ok_and(|b| String::from_utf8_lossy(&b).contains(&nonce))
            })
            .collect()
    };
    assert!(eventually(Duration::from_secs(10), || holders("environ").len() >= 2), "the monitor and the task");
    assert_eq!(holders("cmdline"), Vec::<i32>::new(), "the secret is in no process's arguments");
    for pid in holders("environ") {
        let snoop = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                &bob.0,
                "--regid",
                &bob.0,
                "--clear-groups",
                "--",
                "cat",
                &format!("/proc/{pid}/environ"),
            ])
            .output()
            .expect("setpriv");
        let said = String::from_utf8_lossy(&snoop.stdout).to_string() + &String::from_utf8_lossy(&snoop.stderr);
        assert!(!said.contains(&nonce) && said.contains("Permission denied"), "bob read process {pid}: {said}");
    }
    server.wait_for(id, JobState::Completed);
    assert!(logs(&server, &alice_token, id).1.contains(&format!("has-{nonce}")), "the task itself has it");
    server.stop();
}

#[test]
fn cpu_is_held_to_the_quota_asked_for_and_measured() {
    let Some((server, _sweep)) = default_server("cpu") else { return };
    let spin = "[[job]]\nname = \"spin\"\ncpu = \"200m\"\ncommand = \"timeout 2 sh -c 'while :; do :; done'; true\"\n";
    let id = server.submit(spin)[0];
    server.wait_for(id, JobState::Running);
    let quota = run_cgroup(&server, "cpu", id, 0).join("cpu.cfs_quota_us");
    assert!(eventually(Duration::from_secs(5), || std::fs::read_to_string(&quota).is_ok_and(|q| q.trim() == "20000")));
    let ended = server.wait_for(id, JobState::Completed);
    let used = &ended["used"][0];
    assert_eq!(used["cpu_limit_milli"], 200, "{ended}");
    let cpu_ms = used["cpu_ms"].as_u64().expect("measured");
    assert!(cpu_ms <= 700, "two seconds of spinning at 0.2 cores used {cpu_ms} ms of CPU");
    // What the nodes measured reaches the usage report and the metrics.
    let (_, report) = server.call("GET", "/v1/usage?by=job", None);
    let key = id.to_string();
    let line = report.as_array().and_then(|l| l.iter().find(|l| l["key"] == key.as_str()).cloned());
    assert!(line.is_some_and(|l| l["cpu_hours"].as_f64().is_some_and(|h| h > 0.0)), "{report}");
    let (_, metrics) = server.call("GET", "/metrics", None);
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.contains("gantry_node_confined{node=\"n1\",hierarchy=\"cgroup-v1\"} 1"), "{metrics}");
    let cpu = metrics.lines().find(|l| l.starts_with("gantry_queue_cpu_seconds_total{queue=\"default\"}"));
    let seconds: f64 = cpu.and_then(|l| l.split_whitespace().last()?.parse().ok()).unwrap_or(0.0);
    assert!(seconds > 0.0 && seconds * 1000.0 >= cpu_ms as f64 - 1.0, "{metrics}");
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    assert_eq!(nodes[0]["confinement"]["kind"], "cgroup-v1", "{nodes}");
    server.stop();
}

/// This machine's unified mount offers no memory, cpu or pids controller (they are on v1):
/// with cgroup v2 the node tracks and kills through it and confines devices with its BPF
/// program, and says which limits it cannot apply.
#[test]
fn cgroup_v2_tracks_kills_and_confines_devices_and_says_what_it_cannot_limit() {
    let confine = gantry_server::local_agents::LocalConfinement {
        choice: gantry_agent::cgroup::Choice::V2,
        defaults: Default::default(),
    };
    let Some((server, _sweep)) = confined_server("v2", confine) else { return };
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    let confinement = &nodes[0]["confinement"];
    assert_eq!(confinement["kind"], "cgroup-v2", "{nodes}");
    assert!(confinement["controllers"].as_array().is_some_and(|c| c.contains(&"kill".into())), "{nodes}");
    let m = marker(77);
    let dev = server.data.join("nodes/n1/dev");
    let script = format!(
        "setsid sleep {m} & for d in {d}/nvidia0 {d}/nvidia1; do (exec 3<\"$d\") 2>&1; done; sleep 1",
        d = dev.display()
    );
    let id = server
        .submit(&format!("[[job]]\nname = \"v2\"\ngpu = {{ count = 1 }}\nmemory = \"1GiB\"\ncommand = {script:?}\n"))
        [0];
    let ended = server.wait_for(id, JobState::Completed);
    assert!(sleepers(&m).is_empty(), "cgroup.kill ended the detached process");
    if gantry_agent::cgroup::devices::registered_major("nvidia").is_none() {
        let text = log_of(&server, id);
        let mine = granted_index(&ended);
        let line = |i: u64| text.lines().find(|l| l.contains(&format!("nvidia{i}"))).unwrap_or_default().to_string();
        assert!(line(mine).contains("No such device or address"), "{text}");
        assert!(line(1 - mine).contains("Operation not permitted"), "the device program refuses it: {text}");
    }
    let missing = confinement["missing"].as_array().cloned().unwrap_or_default();
    if missing.contains(&"memory".into()) {
        assert!(ended["used"][0]["memory_limit_bytes"].is_null(), "a limit not applied is not reported: {ended}");
    }
    server.stop();
}
