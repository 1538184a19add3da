//! One task of a step, started on this node: the node's environment, the order's variables
//! over it, its own share of the node's GPUs, its output line by line to whoever asked.

use super::wire::{News, TaskOrder};
use std::io::BufRead;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;

/// Variables that say where a task runs: the node that runs it sets them, whatever `srun`'s
/// environment held.
pub const NODE_LOCAL: [&str; 12] = [
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "SLURMD_NODENAME",
    "SLURM_TOPOLOGY_ADDR",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_TASK_PID",
    "GANTRY_NODE",
    "GANTRY_MASTER_ADDR",
    "GANTRY_STEP_DEVICES",
    "TMPDIR",
    "HOSTNAME",
];

/// `gantry slurm-task PROGRAM ARGS...`: become the task, with `SLURM_TASK_PID` this process's
/// id; only returns (an exit code) when the program cannot be started.
pub fn become_task(argv: &[String]) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        eprintln!("gantry slurm-task: no program");
        return 2;
    };
    let e = Command::new(program).args(args).env("SLURM_TASK_PID", std::process::id().to_string()).exec();
    eprintln!("srun: error: cannot run {program}: {e}");
    if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 }
}

/// The GPUs task `local_id` gets of the node's `all`: every one, or its own `per_task`.
pub fn task_devices(all: &[String], local_id: u32, per_task: Option<u32>) -> Result<Vec<String>, String> {
    let Some(per) = per_task else { return Ok(all.to_vec()) };
    let from = (local_id * per) as usize;
    let to = from + per as usize;
    if to > all.len() {
        return Err(format!(
            "task {local_id} on this node needs GPUs {from}..{to} of the {} the allocation holds here",
            all.len()
        ));
    }
    Ok(all[from..to].to_vec())
}

/// The node's GPUs for steps: what the batch host recorded, else this process's own.
pub fn node_devices() -> Vec<String> {
    let list =
        std::env::var("GANTRY_STEP_DEVICES").or_else(|_| std::env::var("CUDA_VISIBLE_DEVICES")).unwrap_or_default();
    list.split(',').filter(|d| !d.is_empty()).map(str::to_string).collect()
}

/// Run `order` here; its output and end go to `news`. Returns its process group (for a
/// stop) through `started` before waiting. Started through `gantry slurm-task` (this node's
/// gantry: `$GANTRY_BIN`, else this binary), which gives it `SLURM_TASK_PID`.
pub fn run(order: &TaskOrder, all_devices: &[String], news: &Sender<News>, started: impl FnOnce(i32)) {
    match launcher() {
        Some(gantry) => run_with(Some(&gantry), order, all_devices, news, started),
        None => refuse(news, "cannot find the gantry binary".into()),
    }
}

/// This node's gantry, which starts tasks (`gantry slurm-task`).
pub fn launcher() -> Option<std::path::PathBuf> {
    std::env::var_os("GANTRY_BIN").map(std::path::PathBuf::from).or_else(|| std::env::current_exe().ok())
}

/// [`run`], through `launcher slurm-task` or (`None`) straight.
pub(crate) fn run_with(
    launcher: Option<&std::path::Path>,
    order: &TaskOrder,
    all_devices: &[String],
    news: &Sender<News>,
    started: impl FnOnce(i32),
) {
    let devices = match task_devices(all_devices, order.local_id, order.gpus_per_task) {
        Ok(d) => d.join(","),
        Err(m) => return refuse(news, m),
    };
    let Some(program) = order.argv.first() else { return refuse(news, "an empty command".into()) };
    // As Slurm's tasks: srun's environment, with this node's own values for where it runs,
    // and its own pid as SLURM_TASK_PID (`gantry slurm-task` sets it and execs the task: the
    // same process; a shell would drop variables such as bash's exported functions).
    let mut cmd = match launcher {
        Some(gantry) => {
            let mut cmd = Command::new(gantry);
            cmd.arg("slurm-task").args(&order.argv);
            cmd
        }
        None => {
            let mut cmd = Command::new(program);
            cmd.args(&order.argv[1..]);
            cmd
        }
    };
    cmd.env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| k.to_str().is_some_and(|k| NODE_LOCAL.contains(&k))))
        .envs(order.env.iter().filter(|(k, _)| !NODE_LOCAL.contains(&k.as_str())).map(|(k, v)| (k, v)))
        .env("CUDA_VISIBLE_DEVICES", &devices)
        .env("NVIDIA_VISIBLE_DEVICES", if devices.is_empty() { "void" } else { &devices })
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &order.cwd {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return refuse(news, format!("cannot start {program}: {e}")),
    };
    started(child.id() as i32);
    let out = child.stdout.take().map(|s| forward(s, news.clone(), News::Out));
    let err = child.stderr.take().map(|s| forward(s, news.clone(), News::Err));
    let status = child.wait();
    for reader in [out, err].into_iter().flatten() {
        let _ = reader.join();
    }
    let code = match status {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => 255,
    };
    let _ = news.send(News::Exit(code));
}

fn refuse(news: &Sender<News>, message: String) {
    let _ = news.send(News::Refused(message));
}

/// Send each line of `stream` as news (bytes that are not UTF-8 replaced).
fn forward(
    stream: impl std::io::Read + Send + 'static,
    news: Sender<News>,
    kind: fn(String) -> News,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stream);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line).trim_end_matches('\n').to_string();
            if news.send(kind(text)).is_err() {
                return;
            }
            line.clear();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("GPU-{i}")).collect()
    }

    #[test]
    fn each_task_gets_its_own_gpus_or_all_of_them() {
        assert_eq!(task_devices(&gpus(4), 1, Some(2)).expect("fits"), vec!["GPU-2", "GPU-3"]);
        assert_eq!(task_devices(&gpus(2), 5, None).expect("all"), gpus(2));
        let e = task_devices(&gpus(2), 2, Some(1)).expect_err("beyond");
        assert!(e.contains("GPUs 2..3 of the 2"), "{e}");
    }

    #[test]
    fn a_task_runs_with_its_variables_and_reports_lines_and_its_code() {
        let (tx, rx) = std::sync::mpsc::channel();
        let order = TaskOrder {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo $X $CUDA_VISIBLE_DEVICES; echo oops >&2; [ \"$SLURM_TASK_PID\" = $$ ] || echo wrong pid; exit 3"
                    .into(),
            ],
            env: vec![("X".into(), "hello".into()), ("CUDA_VISIBLE_DEVICES".into(), "ignored".into())],
            cwd: None,
            local_id: 1,
            gpus_per_task: Some(1),
        };
        let mut pgid = 0;
        run_with(None, &order, &gpus(2), &tx, |p| pgid = p);
        drop(tx);
        let news: Vec<News> = rx.iter().collect();
        assert!(pgid > 0);
        assert!(news.contains(&News::Out("hello GPU-1".into())), "{news:?}");
        assert!(news.contains(&News::Err("oops".into())), "{news:?}");
        assert_eq!(news.last(), Some(&News::Exit(3)));
        let (tx, rx) = std::sync::mpsc::channel();
        run_with(None, &TaskOrder { argv: vec!["/no/such/program".into()], ..Default::default() }, &[], &tx, |_| {});
        drop(tx);
        assert!(matches!(rx.recv(), Ok(News::Refused(m)) if m.contains("cannot start /no/such/program")));
    }
}
