//! The batch host: `gantry slurm-batch [shape] -- SCRIPT...`, the command of every task of a
//! job `sbatch` made. On the allocation's first node it runs the script once, with `srun` on
//! its `PATH` and the allocation's shape in its environment, and is the hub the step hosts of
//! the other nodes report to; on any other node it is that node's step host. Its exit code is
//! the script's.

use super::auth::{answer, challenge, check};
use super::wire::{Challenge, Report, Welcome, receive, send};
use super::{Allocation, STEP_DIR_VAR, STEP_KEY_VAR, StepError, Unproven, host, host_file, hub_ports};
use std::io::BufReader;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `gantry slurm-batch --nodes N --tasks N --tasks-per-node N [--cpus-per-task N]
/// [--gpus-per-task N] -- SCRIPT...`: run it; the exit code to end with.
pub fn main(args: &[String]) -> i32 {
    match parse(args).and_then(|(alloc, argv)| run(&alloc, &argv)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gantry slurm-batch: {e}");
            1
        }
    }
}

fn parse(args: &[String]) -> Result<(Allocation, Vec<String>), StepError> {
    let split =
        args.iter().position(|a| a == "--").ok_or_else(|| StepError::Usage("no `--` before the script".into()))?;
    let mut alloc = Allocation { nodes: 1, tasks: 1, tasks_per_node: 1, ..Default::default() };
    let mut words = args[..split].iter();
    while let Some(option) = words.next() {
        if option == "--tasks-asked" {
            alloc.tasks_asked = true;
            continue;
        }
        if option == gantry_types::STEP_RECORDS_FLAG {
            alloc.records_fd3 = true;
            continue;
        }
        if option == "--set" {
            let pair = words.next().and_then(|p| p.split_once('=')).filter(|(k, _)| k.starts_with("SLURM_"));
            let (k, v) = pair.ok_or_else(|| StepError::Usage("--set needs SLURM_NAME=VALUE".into()))?;
            alloc.submitted.push((k.to_string(), v.to_string()));
            continue;
        }
        let value = words.next().and_then(|v| v.parse::<u32>().ok()).filter(|&v| v > 0);
        let value = value.ok_or_else(|| StepError::Usage(format!("{option} needs a positive number")))?;
        match option.as_str() {
            "--nodes" => alloc.nodes = value,
            "--tasks" => alloc.tasks = value,
            "--tasks-per-node" => alloc.tasks_per_node = value,
            "--cpus-per-task" => alloc.cpus_per_task = Some(value),
            "--gpus-per-task" => alloc.gpus_per_task = Some(value),
            other => return Err(StepError::Usage(format!("unknown option {other}"))),
        }
    }
    let argv = args[split + 1..].to_vec();
    if argv.is_empty() {
        return Err(StepError::Usage("no script after `--`".into()));
    }
    Ok((alloc, argv))
}

fn run(alloc: &Allocation, argv: &[String]) -> Result<i32, StepError> {
    let var = |k: &str| std::env::var(k).ok();
    let job: u64 = var("SLURM_JOB_ID").and_then(|j| j.parse().ok()).unwrap_or(0);
    let key = var(STEP_KEY_VAR);
    // The allocation's slots are its tasks in rank order: the first runs the script.
    let node_index: u32 = var("GANTRY_RANK").and_then(|n| n.parse().ok()).unwrap_or(0);
    if node_index > 0 {
        let key = key.ok_or_else(no_key)?;
        let hub = var("GANTRY_MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        host::serve(&key, job, node_index, &hub)?;
        return Ok(0);
    }
    let dir = step_dir(job)?;
    // The hub lives as long as this process: its listener and connections close with it.
    let _hub = match (&key, alloc.nodes > 1) {
        (Some(key), true) => Some(open_hub(key, job, &dir)?),
        (None, true) => return Err(no_key()),
        _ => None,
    };
    let code = run_script(alloc, argv, &dir);
    if alloc.records_fd3 {
        report_steps(&dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    code
}

/// Write the steps `srun` recorded to the task's own log, which the batch wrapper kept open
/// as descriptor 3 before it sent the script's output to its files (`steps::records`). A
/// child shell copies them there: std opens no inherited descriptor by number without
/// `unsafe`.
fn report_steps(dir: &Path) {
    use std::io::Write;
    let records = super::records::read_all(dir);
    if records.is_empty() {
        return;
    }
    let child = std::process::Command::new("sh")
        .args(["-c", "cat >&3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = child {
        if let Some(mut stdin) = child.stdin.take() {
            // On a line of their own, whatever the script left unfinished on descriptor 3.
            let _ = stdin.write_all(format!("\n{}", super::records::lines(&records)).as_bytes());
        }
        let _ = child.wait();
    }
}

fn no_key() -> StepError {
    StepError::Refused(format!(
        "no {STEP_KEY_VAR}: this node's agent or the controller predates job steps (protocol 5), so a batch job cannot span nodes"
    ))
}

/// Names tried for a batch's private directory before giving up.
const STEP_DIR_TRIES: u64 = 16;

/// This batch's private directory: `srun`'s link, the step hosts' addresses, step numbers.
fn step_dir(job: u64) -> Result<PathBuf, StepError> {
    use std::os::unix::fs::DirBuilderExt;
    let tmp = std::env::var("TMPDIR").ok().filter(|t| !t.is_empty()).unwrap_or_else(|| "/tmp".into());
    // A fresh name each try, as mkdtemp makes one: a directory left by a batch that was killed
    // (or put there by someone else: /tmp is shared) is never reused and never blocks a job.
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new();
    let mut tries = 0..STEP_DIR_TRIES;
    let dir = loop {
        let Some(attempt) = tries.next() else {
            return Err(StepError::Refused(format!("cannot make a private directory in {tmp}: every name taken")));
        };
        let name = format!("gantry-steps-{job}-{}-{:016x}", std::process::id(), random.hash_one(attempt));
        let dir = Path::new(&tmp).join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StepError::io(format!("cannot create {}", dir.display()))(e)),
        }
    };
    for sub in ["bin", "hosts", "steps"] {
        std::fs::create_dir(dir.join(sub)).map_err(StepError::io(format!("cannot create {}", dir.display())))?;
    }
    let me = std::env::current_exe().map_err(StepError::io("cannot find the gantry binary"))?;
    std::os::unix::fs::symlink(&me, dir.join("bin/srun")).map_err(StepError::io("cannot link srun"))?;
    Ok(dir)
}

/// Listen on the first free hub port; each step host that proves itself is recorded.
fn open_hub(key: &str, job: u64, dir: &Path) -> Result<TcpListener, StepError> {
    let listener =
        hub_ports(job).into_iter().find_map(|p| TcpListener::bind(("0.0.0.0", p)).ok()).ok_or_else(|| {
            StepError::Refused(format!("every hub port of job {job} is taken here: {:?}", hub_ports(job)))
        })?;
    let accepting = listener.try_clone().map_err(StepError::io("hub listener"))?;
    let (key, dir) = (key.to_string(), dir.to_path_buf());
    std::thread::spawn(move || serve_hub(&accepting, &key, &dir));
    Ok(listener)
}

/// Welcome each step host that connects, each on a thread of its own; past
/// [`UNPROVEN_CONNECTIONS_MAX`](super::UNPROVEN_CONNECTIONS_MAX) unproven at once, a
/// connection is closed unread.
fn serve_hub(listener: &TcpListener, key: &str, dir: &Path) {
    let unproven = std::sync::Arc::default();
    for conn in listener.incoming().flatten() {
        let Some(guard) = Unproven::admit(&unproven) else { continue };
        let (key, dir) = (key.to_string(), dir.to_path_buf());
        std::thread::spawn(move || {
            if let Err(e) = welcome(conn, &key, &dir, guard) {
                eprintln!("gantry slurm-batch: a step host's report: {e}");
            }
        });
    }
}

/// Check a step host's report, record where it listens, answer its challenge, and hold the
/// connection open until this process ends (no longer counted among the unproven).
fn welcome(conn: TcpStream, key: &str, dir: &Path, unproven: Unproven) -> Result<(), StepError> {
    let mine = challenge().map_err(StepError::io("cannot make a challenge"))?;
    send(&mut &conn, &Challenge { challenge: mine.clone() })?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).map_err(StepError::io("hub connection"))?;
    let mut reader = BufReader::new(conn.try_clone().map_err(StepError::io("hub connection"))?);
    let Some(report) = receive::<Report>(&mut reader)? else { return Ok(()) };
    if !check(key, "host", &mine, &format!("{}:{}", report.node_index, report.port), &report.answer) {
        return send(&mut &conn, &Welcome::Refused("not this run's step key".into()));
    }
    let peer = conn.peer_addr().map_err(StepError::io("hub connection"))?.ip();
    let file = host_file(dir, report.node_index);
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{}\n", std::net::SocketAddr::new(peer, report.port)))
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(StepError::io("cannot record a step host"))?;
    send(&mut &conn, &Welcome::Answer(answer(key, "hub", &report.challenge, "")))?;
    drop(unproven);
    conn.set_read_timeout(None).map_err(StepError::io("hub connection"))?;
    let mut sink = [0u8; 64];
    while std::io::Read::read(&mut &conn, &mut sink).is_ok_and(|n| n > 0) {}
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// Run the script once with the allocation's variables; its exit code (128 + signal when a
/// signal ended it).
fn run_script(alloc: &Allocation, argv: &[String], dir: &Path) -> Result<i32, StepError> {
    use std::os::unix::process::ExitStatusExt;
    let path = std::env::var("PATH").unwrap_or_default();
    let devices = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default();
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("PATH", format!("{}:{path}", dir.join("bin").display()))
        .env(STEP_DIR_VAR, dir)
        .env("GANTRY_STEP_DEVICES", devices)
        .envs(alloc.to_env())
        .envs(batch_env(alloc));
    // What the node set for a task of its own (Slurm sets these only when asked for).
    if alloc.cpus_per_task.is_none() {
        cmd.env_remove("SLURM_CPUS_PER_TASK");
    }
    if !alloc.tasks_asked {
        cmd.env_remove("SLURM_NTASKS").env_remove("SLURM_NPROCS");
    }
    let status = cmd.status().map_err(StepError::io(format!("cannot run {}", argv[0])))?;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// What Slurm's batch step sees of the allocation: its task count and layout; and one
/// process's place for `torch.distributed` (the script is one process; `srun` gives ranks).
fn batch_env(alloc: &Allocation) -> Vec<(String, String)> {
    let per_node = tasks_per_node(alloc.tasks, alloc.nodes, Some(alloc.tasks_per_node));
    let cpus_on_node = std::env::var("SLURM_CPUS_ON_NODE").unwrap_or_else(|_| "1".into());
    let cpus_per_node = if alloc.nodes > 1 { format!("{cpus_on_node}(x{})", alloc.nodes) } else { cpus_on_node };
    let mut env = vec![
        ("SLURM_TASKS_PER_NODE", tasks_per_node_text(&per_node)),
        ("SLURM_JOB_CPUS_PER_NODE", cpus_per_node),
        ("SLURM_GTIDS", "0".into()),
        ("SLURM_TASK_PID", std::process::id().to_string()),
        ("SLURM_JOB_UID", nix::unistd::getuid().to_string()),
        ("SLURM_JOB_GID", nix::unistd::getgid().to_string()),
        ("SLURM_NODEID", "0".into()),
        ("SLURM_PROCID", "0".into()),
        ("SLURM_LOCALID", "0".into()),
        ("RANK", "0".into()),
        ("WORLD_SIZE", "1".into()),
        ("LOCAL_RANK", "0".into()),
        ("LOCAL_WORLD_SIZE", "1".into()),
    ];
    env.extend(alloc.gpus_per_task.map(|g| ("SLURM_GPUS_PER_TASK", g.to_string())));
    env.extend(alloc.submitted.iter().map(|(k, v)| (k.as_str(), v.clone())));
    // Slurm says how many tasks only when they were asked for.
    if alloc.tasks_asked {
        env.extend([("SLURM_NTASKS", alloc.tasks.to_string()), ("SLURM_NPROCS", alloc.tasks.to_string())]);
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// `tasks` spread over `nodes` in blocks: the first nodes take one more when it does not
/// divide, none more than `max_per_node`.
pub fn tasks_per_node(tasks: u32, nodes: u32, max_per_node: Option<u32>) -> Vec<u32> {
    let nodes = nodes.max(1);
    let (base, extra) = (tasks / nodes, tasks % nodes);
    let mut counts: Vec<u32> = (0..nodes).map(|i| base + u32::from(i < extra)).collect();
    if let Some(max) = max_per_node.filter(|&m| counts.first().is_some_and(|&c| c > m)) {
        // More than a node may take: fill each to its maximum in turn.
        let mut left = tasks;
        for c in &mut counts {
            *c = left.min(max);
            left -= *c;
        }
    }
    counts
}

/// Slurm's form of a per-node task list: `4(x2),3`.
pub fn tasks_per_node_text(counts: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|&&c| c == counts[i]).count();
        parts.push(if run > 1 { format!("{}(x{run})", counts[i]) } else { counts[i].to_string() });
        i += run;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_spread_in_blocks_as_slurm_writes_them() {
        assert_eq!(tasks_per_node(8, 2, None), vec![4, 4]);
        assert_eq!(tasks_per_node(3, 2, None), vec![2, 1]);
        assert_eq!(tasks_per_node(4, 3, Some(2)), vec![2, 1, 1]);
        assert_eq!(tasks_per_node_text(&[4, 4]), "4(x2)");
        assert_eq!(tasks_per_node_text(&[2, 1, 1]), "2,1(x2)");
        assert_eq!(tasks_per_node_text(&[2]), "2");
    }

    /// Two batches of one job id in one process (a pid reused, a directory left by a killed
    /// batch) get directories of their own: the second once failed with "File exists".
    #[test]
    fn a_left_over_step_directory_never_blocks_a_batch() {
        let first = super::step_dir(987_654).expect("a directory");
        let second = super::step_dir(987_654).expect("another, not the left-over one");
        assert_ne!(first, second);
        assert!(second.join("bin/srun").exists());
        let _ = std::fs::remove_dir_all(first);
        let _ = std::fs::remove_dir_all(second);
    }

    #[test]
    fn the_batch_hosts_arguments_are_checked() {
        let args = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let (alloc, argv) =
            parse(&args("--nodes 2 --tasks 4 --tasks-per-node 2 --gpus-per-task 1 -- sh run.sh")).expect("ok");
        assert_eq!((alloc.nodes, alloc.tasks, alloc.gpus_per_task), (2, 4, Some(1)));
        assert_eq!(argv, args("sh run.sh"));
        for (bad, says) in [
            ("--nodes 2 sh", "no `--`"),
            ("--set PATH=/x -- sh", "SLURM_NAME=VALUE"),
            ("--nodes 0 -- sh", "positive"),
            ("--color 2 -- sh", "unknown option --color"),
            ("--nodes 2 --", "no script"),
        ] {
            let e = parse(&args(bad)).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}

#[cfg(test)]
mod hub_tests {
    use super::*;

    /// A step host's report under `key` to a hub of the run whose key is "right": what the hub
    /// answers, and whether it recorded the host.
    fn report_with(key: &str) -> (Welcome, bool) {
        let dir = std::env::temp_dir().join(format!("gantry-hub-{}-{key}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("hosts")).expect("dir");
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr");
        let hub_dir = dir.clone();
        std::thread::spawn(move || {
            let (conn, _) = listener.accept().expect("accept");
            let _ = welcome(conn, "right", &hub_dir, Unproven::admit(&Default::default()).expect("room"));
        });
        let conn = TcpStream::connect(addr).expect("connect");
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let c: Challenge = receive(&mut reader).expect("read").expect("a challenge");
        let report = Report {
            node_index: 1,
            port: 4242,
            answer: answer(key, "host", &c.challenge, "1:4242"),
            challenge: "abc".into(),
        };
        send(&mut &conn, &report).expect("sent");
        let welcome: Welcome = receive(&mut reader).expect("read").expect("a welcome");
        let recorded = host_file(&dir, 1).exists();
        let _ = std::fs::remove_dir_all(&dir);
        (welcome, recorded)
    }

    /// A flood of connections that never prove themselves gets the first
    /// `UNPROVEN_CONNECTIONS_MAX` each a challenge (and 10 s); the rest are closed unread.
    #[test]
    fn a_flood_of_unproven_connections_is_closed_past_the_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr");
        let dir = std::env::temp_dir().join(format!("gantry-hub-flood-{}", std::process::id()));
        std::thread::spawn(move || serve_hub(&listener, "right", &dir));
        let conns: Vec<TcpStream> = (0..super::super::UNPROVEN_CONNECTIONS_MAX + 8)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        let challenged = conns
            .iter()
            .filter(|c| {
                c.set_read_timeout(Some(std::time::Duration::from_secs(3))).expect("timeout");
                receive::<Challenge>(&mut BufReader::new(*c)).ok().flatten().is_some()
            })
            .count();
        assert_eq!(challenged, super::super::UNPROVEN_CONNECTIONS_MAX);
    }

    #[test]
    fn the_hub_records_only_hosts_that_hold_the_key_and_proves_it_holds_it_too() {
        let (welcome, recorded) = report_with("wrong");
        assert!(matches!(welcome, Welcome::Refused(_)) && !recorded, "{welcome:?}");
        let (welcome, recorded) = report_with("right");
        assert!(recorded);
        assert!(matches!(welcome, Welcome::Answer(a) if check("right", "hub", "abc", "", &a)));
    }
}
