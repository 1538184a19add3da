//! `srun` inside a batch job: one job step. Its tasks are laid out over the allocation in
//! blocks from the first node (where `srun` runs), each gets its place in the step
//! (`SLURM_PROCID`, `RANK`, ...) and its GPUs, the first node's run here and the others'
//! through their step hosts; their output comes back line by line (`-l`: with the task's
//! number), and `srun` exits with the highest exit code of its tasks.

use super::auth::answer;
use super::batch::{tasks_per_node, tasks_per_node_text};
use super::exec::{self, NODE_LOCAL};
use super::wire::{Challenge, News, Signed, TaskOrder, receive, send};
use super::{Allocation, REPORT_WITHIN_S, STEP_DIR_VAR, STEP_KEY_VAR, StepError, host_file};
use std::io::BufReader;
use std::net::TcpStream;
use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::time::{Duration, Instant};

/// What one `srun` asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SrunArgs {
    pub ntasks: Option<u32>,
    pub nodes: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    pub gpus_per_task: Option<u32>,
    pub cpus_per_task: Option<u32>,
    pub label: bool,
    pub command: Vec<String>,
}

/// `srun ARGS`: the exit code to end with.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("srun: error: {e}");
            1
        }
    }
}

fn run(args: &[String]) -> Result<i32, StepError> {
    let args = parse(args)?;
    let Some(dir) = std::env::var_os(STEP_DIR_VAR) else {
        return Err(StepError::Usage(
            "gantry's srun runs job steps inside a batch job (sbatch); to run a command as a job of its own use \
             `sbatch --wait --wrap 'COMMAND'`"
                .into(),
        ));
    };
    let alloc = Allocation::from_env(|k| std::env::var(k).ok())
        .ok_or_else(|| StepError::Usage("this job's allocation variables (GANTRY_ALLOC_*) are missing".into()))?;
    // As Slurm's srun reads SLURM_GPUS_PER_TASK and SLURM_CPUS_PER_TASK: the job's by default.
    let args = SrunArgs {
        gpus_per_task: args.gpus_per_task.or(alloc.gpus_per_task),
        cpus_per_task: args.cpus_per_task.or(alloc.cpus_per_task),
        ..args
    };
    let counts = layout(&alloc, &args)?;
    let step = next_step(Path::new(&dir))?;
    // MASTER_ADDR as gantry set it is node 0's view of itself (loopback): each node gives
    // its own; one the script exported travels as it is.
    let ours = std::env::var("GANTRY_MASTER_ADDR").ok();
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, v)| !(NODE_LOCAL.contains(&k.as_str()) || k == "MASTER_ADDR" && Some(v) == ours.as_ref()))
        .collect();
    let orders = orders(&args, &counts, step, &env);
    let mut record = step_record(&args, &counts, step);
    super::records::write(Path::new(&dir), &record);
    let code = launch_and_wait(&args, &counts, orders, Path::new(&dir));
    record.end_s = Some(record.start_s.max(now_s()));
    record.exit_code = Some(*code.as_ref().unwrap_or(&1));
    super::records::write(Path::new(&dir), &record);
    code
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The step as it starts: its number, program, tasks and nodes (for `sacct`'s `ID.N` rows).
fn step_record(a: &SrunArgs, counts: &[u32], step: u32) -> gantry_types::StepRecord {
    let program = a.command.first().map_or("", |c| c.rsplit('/').next().unwrap_or(c));
    let nodes: Vec<String> = std::env::var("GANTRY_RUN_NODES")
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.is_empty())
        .take(counts.len())
        .map(str::to_string)
        .collect();
    gantry_types::StepRecord {
        step,
        name: program.chars().take(gantry_types::STEP_NAME_CHARS_MAX).collect(),
        tasks: counts.iter().sum(),
        nodes: gantry_types::text::hostlist(&nodes),
        start_s: now_s(),
        end_s: None,
        exit_code: None,
    }
}

/// Read srun's options; the command starts at the first word that is not one. Options gantry
/// does not do are refused by name.
pub fn parse(args: &[String]) -> Result<SrunArgs, StepError> {
    let mut a = SrunArgs::default();
    let mut i = 0;
    while i < args.len() {
        let word = &args[i];
        if word == "--" {
            i += 1;
            break;
        }
        if !word.starts_with('-') {
            break;
        }
        let (option, inline) = match word.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
            _ if !word.starts_with("--") && word.len() > 2 => (word[..2].to_string(), Some(word[2..].to_string())),
            _ => (word.clone(), None),
        };
        let flag = matches!(option.as_str(), "-l" | "--label" | "-u" | "--unbuffered");
        let value = if flag {
            None
        } else if inline.is_some() {
            inline
        } else {
            i += 1;
            args.get(i).cloned()
        };
        apply(&mut a, &option, value.as_deref())?;
        i += 1;
    }
    a.command = args[i.min(args.len())..].to_vec();
    if a.command.is_empty() {
        return Err(StepError::Usage("no command to run (srun [OPTIONS] COMMAND [ARGS])".into()));
    }
    Ok(a)
}

fn apply(a: &mut SrunArgs, option: &str, value: Option<&str>) -> Result<(), StepError> {
    let number = || -> Result<Option<u32>, StepError> {
        let v = value.unwrap_or_default();
        v.parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .map(Some)
            .ok_or_else(|| StepError::Usage(format!("{option}={v}: a positive number is needed")))
    };
    match option {
        "-n" | "--ntasks" => a.ntasks = number()?,
        "-N" | "--nodes" => a.nodes = number()?,
        "--ntasks-per-node" => a.ntasks_per_node = number()?,
        "--gpus-per-task" => a.gpus_per_task = number()?,
        "-c" | "--cpus-per-task" => a.cpus_per_task = number()?,
        "-l" | "--label" => a.label = true,
        // Output is passed on line by line already.
        "-u" | "--unbuffered" => {}
        "--mpi" if value == Some("none") => {}
        "--export" if value == Some("ALL") => {}
        other => {
            return Err(StepError::Usage(format!(
                "{other}: not supported by gantry's srun (it takes -n, -N, --ntasks-per-node, --gpus-per-task, -c, -l, -u, --mpi=none, --export=ALL)"
            )));
        }
    }
    Ok(())
}

/// How many of the step's tasks each of the allocation's first nodes runs.
pub fn layout(alloc: &Allocation, a: &SrunArgs) -> Result<Vec<u32>, StepError> {
    let per_node_cap = a.ntasks_per_node;
    let tasks = match (a.ntasks, a.nodes, per_node_cap) {
        (Some(n), _, _) => n,
        (None, Some(nodes), Some(per)) => nodes * per,
        (None, None, Some(per)) => alloc.nodes * per,
        (None, _, None) => alloc.tasks,
    };
    let nodes = a.nodes.unwrap_or_else(|| alloc.nodes.min(tasks.div_ceil(alloc.tasks_per_node.max(1))).max(1));
    if nodes > alloc.nodes {
        return Err(StepError::Usage(format!("{nodes} nodes asked for; the job's allocation has {}", alloc.nodes)));
    }
    if tasks < nodes {
        return Err(StepError::Usage(format!("{tasks} task(s) cannot cover {nodes} nodes")));
    }
    let counts = tasks_per_node(tasks, nodes, per_node_cap);
    if counts.iter().sum::<u32>() != tasks {
        return Err(StepError::Usage(format!(
            "{tasks} tasks do not fit {nodes} nodes at {} per node",
            per_node_cap.unwrap_or_default()
        )));
    }
    // As Slurm: a step's tasks use the CPUs the allocation holds on each node, no more.
    let room = alloc.cpus_per_task.unwrap_or(1) * alloc.tasks_per_node;
    let each = a.cpus_per_task.unwrap_or(1);
    if let Some(&most) = counts.iter().max().filter(|&&most| most.saturating_mul(each) > room) {
        return Err(StepError::Usage(format!(
            "{most} task(s) of {each} CPU(s) on one node, but the job holds {room} CPU(s) there (more processors than permitted)"
        )));
    }
    Ok(counts)
}

/// A new step number: the first `steps/N` this batch has not used (Slurm's steps count from 0).
fn next_step(dir: &Path) -> Result<u32, StepError> {
    for n in 0..100_000u32 {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join("steps").join(n.to_string())) {
            Ok(_) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StepError::io("cannot number the step")(e)),
        }
    }
    Err(StepError::Refused("this batch has run 100,000 steps".into()))
}

/// Each task's order, in rank order: srun's own variables, its place in the step over them.
pub fn orders(a: &SrunArgs, counts: &[u32], step: u32, env: &[(String, String)]) -> Vec<(u32, TaskOrder)> {
    let tasks: u32 = counts.iter().sum();
    let nodes = std::env::var("GANTRY_RUN_NODES").unwrap_or_default();
    let step_nodes: Vec<String> =
        nodes.split(',').filter(|n| !n.is_empty()).take(counts.len()).map(str::to_string).collect();
    let nodelist = gantry_types::text::hostlist(&step_nodes);
    let cwd = std::env::current_dir().ok().map(|d| d.display().to_string());
    let mut out = Vec::new();
    let mut rank = 0;
    for (node, &count) in counts.iter().enumerate() {
        for local in 0..count {
            let mut vars: Vec<(String, String)> = env.to_vec();
            let place = [
                ("SLURM_STEP_ID", step.to_string()),
                ("SLURM_STEPID", step.to_string()),
                ("SLURM_PROCID", rank.to_string()),
                ("SLURM_LOCALID", local.to_string()),
                ("SLURM_NODEID", node.to_string()),
                ("SLURM_NTASKS", tasks.to_string()),
                ("SLURM_NPROCS", tasks.to_string()),
                ("SLURM_STEP_NUM_TASKS", tasks.to_string()),
                ("SLURM_NNODES", counts.len().to_string()),
                ("SLURM_STEP_NUM_NODES", counts.len().to_string()),
                ("SLURM_STEP_NODELIST", nodelist.clone()),
                ("SLURM_NODELIST", nodelist.clone()),
                ("SLURM_STEP_TASKS_PER_NODE", tasks_per_node_text(counts)),
                ("SLURM_TASKS_PER_NODE", tasks_per_node_text(counts)),
                ("RANK", rank.to_string()),
                ("WORLD_SIZE", tasks.to_string()),
                ("LOCAL_RANK", local.to_string()),
                ("LOCAL_WORLD_SIZE", count.to_string()),
                ("SLURM_DISTRIBUTION", "block".to_string()),
                (
                    "SLURM_GTIDS",
                    (rank - local..rank - local + count).map(|r| r.to_string()).collect::<Vec<_>>().join(","),
                ),
            ];
            vars.retain(|(k, _)| !place.iter().any(|(p, _)| p == k));
            vars.extend(place.into_iter().map(|(k, v)| (k.to_string(), v)));
            vars.extend(a.cpus_per_task.map(|c| ("SLURM_CPUS_PER_TASK".to_string(), c.to_string())));
            vars.extend(a.gpus_per_task.map(|g| ("SLURM_GPUS_PER_TASK".to_string(), g.to_string())));
            vars.extend(a.label.then(|| ("SLURM_LABELIO".to_string(), "1".to_string())));
            let order = TaskOrder {
                argv: a.command.clone(),
                env: vars,
                cwd: cwd.clone(),
                local_id: local,
                gpus_per_task: a.gpus_per_task,
            };
            out.push((node as u32, order));
            rank += 1;
        }
    }
    out
}

/// Start every task (here, or through its node's step host), print their output as it comes,
/// and return the highest exit code.
fn launch_and_wait(a: &SrunArgs, counts: &[u32], orders: Vec<(u32, TaskOrder)>, dir: &Path) -> Result<i32, StepError> {
    let key = std::env::var(STEP_KEY_VAR).unwrap_or_default();
    let (tx, rx) = channel::<(u32, News)>();
    let devices = exec::node_devices();
    for (rank, (node, order)) in orders.into_iter().enumerate() {
        let rank = rank as u32;
        let task_tx = relay(rank, tx.clone());
        if node == 0 {
            let devices = devices.clone();
            std::thread::spawn(move || exec::run(&order, &devices, &task_tx, |_| {}));
        } else {
            let host = wait_for_host(dir, node)?;
            let key = key.clone();
            std::thread::spawn(move || {
                if let Err(e) = remote(&host, &key, &order, &task_tx) {
                    let _ = task_tx.send(News::Refused(format!("node {node}: {e}")));
                }
            });
        }
    }
    drop(tx);
    let mut highest = 0;
    let mut ended = 0;
    let tasks: u32 = counts.iter().sum();
    for (rank, news) in rx {
        let label = if a.label { format!("{rank}: ") } else { String::new() };
        match news {
            News::Out(line) => println!("{label}{line}"),
            News::Err(line) => eprintln!("{label}{line}"),
            News::Exit(code) => {
                highest = highest.max(code);
                ended += 1;
            }
            News::Refused(m) => {
                eprintln!("srun: error: task {rank}: {m}");
                highest = highest.max(1);
                ended += 1;
            }
        }
    }
    if ended < tasks {
        eprintln!("srun: error: {} task(s) ended without an exit code (their node went away)", tasks - ended);
        highest = highest.max(1);
    }
    Ok(highest)
}

/// A sender for one task's news, tagged with its rank.
fn relay(rank: u32, to: Sender<(u32, News)>) -> Sender<News> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for news in rx {
            if to.send((rank, news)).is_err() {
                return;
            }
        }
    });
    tx
}

/// Where node `node`'s step host listens, once it has reported (it starts with the job).
fn wait_for_host(dir: &Path, node: u32) -> Result<String, StepError> {
    let deadline = Instant::now() + Duration::from_secs(REPORT_WITHIN_S);
    loop {
        if let Ok(text) = std::fs::read_to_string(host_file(dir, node)) {
            return Ok(text.trim().to_string());
        }
        if Instant::now() > deadline {
            return Err(StepError::Refused(format!(
                "node {node} of the allocation has no step host after {REPORT_WITHIN_S} s"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Send one order to a step host and pass its news on until the task ends.
fn remote(host: &str, key: &str, order: &TaskOrder, news: &Sender<News>) -> Result<(), StepError> {
    let conn = TcpStream::connect(host).map_err(StepError::io(format!("cannot reach the step host at {host}")))?;
    let mut reader = BufReader::new(conn.try_clone().map_err(StepError::io("step connection"))?);
    let challenge: Challenge =
        receive(&mut reader)?.ok_or_else(|| StepError::Refused("the step host closed the connection".into()))?;
    let text = serde_json::to_string(order).expect("an order serializes");
    let answer = answer(key, "order", &challenge.challenge, &text);
    send(&mut &conn, &Signed { order: text, answer })?;
    while let Some(n) = receive::<News>(&mut reader)? {
        let last = matches!(n, News::Exit(_) | News::Refused(_));
        let _ = news.send(n);
        if last {
            return Ok(());
        }
    }
    Err(StepError::Refused("the step host went away before its task ended".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn srun_reads_its_options_and_refuses_others_by_name() {
        let a = parse(&words("-n4 --gpus-per-task=1 -l -N 2 python train.py --lr 3")).expect("ok");
        assert_eq!((a.ntasks, a.nodes, a.gpus_per_task, a.label), (Some(4), Some(2), Some(1), true));
        assert_eq!(a.command, words("python train.py --lr 3"));
        assert_eq!(parse(&words("-- -weird")).expect("ok").command, words("-weird"));
        for (bad, says) in [
            ("--pty bash", "--pty: not supported"),
            ("-n 0 true", "positive"),
            ("-n", "positive"),
            ("-l", "no command"),
            ("--mpi=pmix true", "--mpi: not supported"),
        ] {
            let e = parse(&words(bad)).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn steps_lay_out_over_the_allocation_in_blocks() {
        let alloc = Allocation { nodes: 2, tasks: 8, tasks_per_node: 4, ..Default::default() };
        let with = |s: &str| layout(&alloc, &parse(&words(&format!("{s} true"))).expect("parses"));
        assert_eq!(with("").expect("default"), vec![4, 4]);
        assert_eq!(with("-n 1").expect("one"), vec![1]);
        assert_eq!(with("-n 5").expect("five"), vec![3, 2]);
        assert_eq!(with("-N 2 --ntasks-per-node 1").expect("one per node"), vec![1, 1]);
        assert!(with("-N 3").expect_err("too many").to_string().contains("allocation has 2"));
        assert!(with("-n 1 -N 2").expect_err("too few").to_string().contains("cannot cover 2 nodes"));
        assert!(with("-n 5 -N 2 --ntasks-per-node 2").expect_err("over").to_string().contains("do not fit"));
        // No more tasks on a node than the CPUs the job holds there: not 100,000 processes.
        let e = with("-n 100000").expect_err("flood").to_string();
        assert!(e.contains("holds 4 CPU(s)") && e.contains("more processors than permitted"), "{e}");
        assert!(with("-n 9").is_err(), "5 on a node of 4");
        let wide = Allocation { nodes: 1, tasks: 1, tasks_per_node: 1, cpus_per_task: Some(4), ..Default::default() };
        let four = parse(&words("-n 4 -c 1 true")).expect("parses");
        assert_eq!(layout(&wide, &four).expect("4 tasks of 1 CPU in 4 CPUs"), vec![4]);
        let eight = parse(&words("-n 8 -c 1 true")).expect("parses");
        assert!(layout(&wide, &eight).is_err());
    }

    #[test]
    fn each_task_learns_its_place_in_the_step() {
        let a = parse(&words("--gpus-per-task 1 true")).expect("ok");
        let env = vec![("SLURM_PROCID".to_string(), "0".to_string()), ("MINE".to_string(), "x".to_string())];
        let orders = orders(&a, &[2, 1], 3, &env);
        assert_eq!(orders.len(), 3);
        let (node, last) = &orders[2];
        let get = |k: &str| last.env.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(*node, 1);
        assert_eq!((get("SLURM_PROCID"), get("SLURM_LOCALID"), get("SLURM_NODEID")), (Some("2"), Some("0"), Some("1")));
        assert_eq!((get("RANK"), get("WORLD_SIZE"), get("LOCAL_WORLD_SIZE")), (Some("2"), Some("3"), Some("1")));
        assert_eq!(
            (get("SLURM_STEP_ID"), get("SLURM_TASKS_PER_NODE"), get("MINE")),
            (Some("3"), Some("2,1"), Some("x"))
        );
        assert_eq!(last.env.iter().filter(|(k, _)| k == "SLURM_PROCID").count(), 1, "srun's own value replaced");
        assert_eq!((orders[1].1.local_id, orders[1].1.gpus_per_task), (1, Some(1)));
    }
}
