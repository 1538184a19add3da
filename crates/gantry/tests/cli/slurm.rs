//! Slurm both ways, against Slurm itself: the fixtures recorded from a running Slurm
//! (`tools/record-slurm-fixtures.sh`) come in and make a what-if report; the gres.conf that
//! `gantry plan --out` writes is read by Slurm's own slurmd (`slurmd -G`); bad Slurm input is
//! named by file and line, or skipped under `--lenient`, with nothing half-written.

use super::{gantry, stderr, stdout, temp_dir, write_fixture};
use std::collections::BTreeMap;
use std::process::Command;

const RECORDED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../gantry-spec/fixtures/slurm/recorded");
const MAPS: [&str; 4] = ["--map", "a100=A100-SXM4-80GB", "--map", "h100=H100-SXM5-80GB"];

/// The recorded cluster and its history through import, `sim --sacct` and `whatif`: every
/// allocation accounted for, the history column from the recorded starts, the report in text,
/// JSON and HTML.
#[test]
fn the_recorded_slurm_cluster_and_history_make_a_whatif_report() {
    let dir = temp_dir("slurm-recorded");
    let queues = dir.join("queues.toml");
    let q = queues.to_str().expect("utf-8");
    let (conf, gres) = (format!("{RECORDED}/slurm.conf"), format!("{RECORDED}/gres.conf"));
    let mut args = vec!["import", "slurm", "--conf", &conf, "--gres", &gres, "--queues-out", q];
    args.extend(MAPS);
    let out = gantry(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("imported 5 node(s)"), "{}", stderr(&out));
    let fleet = write_fixture(&dir, "fleet.toml", &stdout(&out));
    let sacct = format!("{RECORDED}/sacct.txt");
    let mut args = vec!["sim", "--sacct", &sacct, "--fleet", &fleet, "--json"];
    args.extend(MAPS);
    let out = gantry(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(runs[0]["started"], 24, "{runs}");
    let html = dir.join("whatif.html");
    let h = html.to_str().expect("utf-8");
    let mut args = vec!["whatif", "--fleet", &fleet, "--sacct", &sacct, "--queues", q, "--html", h];
    args.extend(MAPS);
    let out = gantry(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("as it happened") && text.contains("queue gpu: wait p50 / p90"), "{text}");
    assert!(text.contains("jobs started                         24 of 24"), "{text}");
    assert!(text.contains("GPUs that would have sufficed:"), "{text}");
    assert!(stderr(&out).contains("1 × cancelled while pending"), "{}", stderr(&out));
    let page = std::fs::read_to_string(&html).expect("html written");
    assert!(page.contains("<table>") && page.contains("as it happened"), "{page}");
    args.push("--json");
    let out = gantry(&args);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(report["schema"], "gantry.whatif/v1");
    let history = &report["columns"][0];
    assert_eq!((history["name"].as_str(), history["started"].as_u64()), (Some("as it happened"), Some(24)));
    // The recorded waits: the sweep's array tasks queued behind the two-node gang.
    assert!(history["waits"]["max_s"].as_u64().is_some_and(|w| w >= 20), "{history}");
}

/// `slurmd` on this machine (Debian's package; `tools/install-test-deps.sh` installs it).
fn slurmd() -> &'static str {
    let found = ["/usr/sbin/slurmd", "slurmd"]
        .into_iter()
        .find(|bin| Command::new(bin).arg("-V").output().is_ok_and(|o| o.status.success()));
    found.expect("the Slurm export test needs Debian's slurmd: run tools/install-test-deps.sh")
}

/// The gres.conf and NodeName lines `gantry plan --out` writes, read by slurmd itself: for a
/// node whose GPUs are listed by device file, slurmd must see each GPU with the type and the
/// shard count the plan gave; for a node left to `AutoDetect=nvml` (MIG), its lines must parse
/// (what NVML would report needs a GPU, which this machine has not). Device files are links
/// to /dev/null in a temporary directory.
#[test]
fn slurmd_reads_the_gres_conf_gantry_plan_writes() {
    let slurmd = slurmd();
    let dir = temp_dir("slurm-export");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let plan = dir.join("plan");
    let out = gantry(&[
        "plan",
        "--fleet",
        &format!("{examples}/plan-fleet.toml"),
        "--workload",
        &format!("{examples}/plan-mix.toml"),
        "--out",
        plan.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let nodes = std::fs::read_to_string(plan.join("slurm-nodes.conf")).expect("slurm-nodes.conf");
    let gres = std::fs::read_to_string(plan.join("gres.conf")).expect("gres.conf");
    let devices = dir.join("dev");
    std::fs::create_dir_all(&devices).expect("dev");
    for i in 0..16 {
        let _ = std::os::unix::fs::symlink("/dev/null", devices.join(format!("nvidia{i}")));
    }
    let gres = gres.replace("/dev/", &format!("{}/", devices.display()));
    std::fs::write(dir.join("gres.conf"), &gres).expect("gres.conf");
    let conf = format!(
        "ClusterName=export\nSlurmctldHost=localhost\nSlurmdSpoolDir={0}/spool\nSlurmdParameters=config_overrides\n\
         ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\nSelectType=select/cons_tres\n{nodes}",
        dir.display()
    );
    let conf_path = write_fixture(&dir, "slurm.conf", &conf);
    let (mut by_file, mut autodetect) = (0, 0);
    for line in nodes.lines().filter(|l| l.starts_with("NodeName=")) {
        let name = line["NodeName=".len()..].split_whitespace().next().expect("name");
        let out =
            Command::new(slurmd).args(["-G", "-N", name]).env("SLURM_CONF", &conf_path).output().expect("slurmd runs");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!said.contains("Parse error") && !said.contains("Parsing error"), "{name}: {said}\n{gres}");
        let wanted = gres_counts(line);
        let own: Vec<&str> = gres.lines().filter(|l| l.starts_with(&format!("NodeName={name} "))).collect();
        if own.iter().any(|l| l.contains("AutoDetect=nvml")) {
            autodetect += 1;
            continue;
        }
        by_file += 1;
        // slurmd caps what slurm.conf and gres.conf disagree on with a warning: none allowed.
        assert!(
            out.status.success() && !said.contains("WARNING") && !said.contains("error:"),
            "{name}: {said}\n{gres}"
        );
        let mut seen: BTreeMap<String, u64> = BTreeMap::new();
        for l in said.lines().filter_map(|l| l.split_once("Gres Name=").map(|(_, r)| r)) {
            let field =
                |key: &str| l.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_default().to_string();
            let count: u64 = field("Count=").parse().unwrap_or(0);
            let name = l.split_whitespace().next().unwrap_or_default();
            let key = if name == "gpu" { format!("gpu:{}", field("Type=")) } else { name.to_string() };
            *seen.entry(key).or_default() += count;
        }
        seen.retain(|_, n| *n > 0);
        assert_eq!(seen, wanted, "{name}: slurmd saw {said}");
    }
    assert!(by_file >= 2 && autodetect >= 1, "the plan covers both kinds of node: {nodes}");
}

/// `Gres=gpu:TYPE:N,shard:M,mps:K…` of a NodeName line as `gpu:TYPE` → N, `shard` → M,
/// `mps` → K (the plan's gres.conf puts shards and MPS on their GPUs' device files).
fn gres_counts(line: &str) -> BTreeMap<String, u64> {
    let gres = line.split_whitespace().find_map(|w| w.strip_prefix("Gres=")).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for entry in gres.split(',') {
        let parts: Vec<&str> = entry.split(':').collect();
        match parts.as_slice() {
            ["gpu", ty, n] => *counts.entry(format!("gpu:{ty}")).or_default() += n.parse::<u64>().expect("count"),
            ["shard" | "mps", n] => {
                *counts.entry(parts[0].to_string()).or_default() += n.parse::<u64>().expect("count")
            }
            _ => {}
        }
    }
    counts
}

/// Hostile Slurm input through the CLI: a 10 MB line, rows out of order, a broken conf line.
/// Each is refused naming file:line with stdout left empty, or skipped and counted under
/// --lenient.
#[test]
fn bad_slurm_input_is_named_by_file_and_line_and_nothing_is_half_written() {
    let dir = temp_dir("slurm-bad");
    let header = "JobID|User|Partition|Submit|Start|End|State|AllocTRES|NNodes";
    let good = "1|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T11:00:05|COMPLETED|cpu=4|1";
    let backwards = "2|ada|gpu|2026-11-02T10:00:00|2026-11-02T10:00:05|2026-11-02T09:00:00|COMPLETED|cpu=4|1";
    let huge = format!("3|ada|gpu|{}", "x".repeat(10 << 20));
    let sacct = write_fixture(&dir, "sacct.txt", &format!("{header}\n{good}\n{backwards}\n{huge}\n"));
    let out = gantry(&["import", "sacct", &sacct]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sacct.txt:3: job 2: End 2026-11-02T09:00:00 is before Start"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "nothing written on a refusal");
    let out = gantry(&["import", "sacct", &sacct, "--lenient"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "the good row only");
    let said = stderr(&out);
    assert!(
        said.contains("1 × not valid accounting: a job that ends before it starts")
            && said.contains("1 × not valid accounting: an over-long line"),
        "{said}"
    );
    let conf =
        write_fixture(&dir, "slurm.conf", "NodeName=ok CPUs=8 RealMemory=1000\nNodeName=bad CPUs=8 RealMemory=lots\n");
    let queues = dir.join("queues.toml");
    let out = gantry(&["import", "slurm", "--conf", &conf, "--queues-out", queues.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("slurm.conf:2: node bad: RealMemory=\"lots\" is not a whole number"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty() && !queues.exists(), "no fleet and no queue file on a refusal");
    let out = gantry(&["import", "slurm", "--conf", &conf, "--lenient"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("name = \"ok\"") && !stdout(&out).contains("\"bad\""), "{}", stdout(&out));
    assert!(stderr(&out).contains("skipped 1 line(s) (--lenient):"), "{}", stderr(&out));
}

/// Slurm's commands by their own names: `gantry slurm-install` links them, and started as
/// `sbatch`, `squeue`, `scancel` gantry answers as they do — `Submitted batch job N`,
/// `squeue`'s default columns, `scancel` quiet on success — and refuses what it does not do.
#[test]
fn sbatch_squeue_and_scancel_answer_by_their_names() {
    let dir = temp_dir("slurm-names");
    let bin = dir.join("bin");
    let out = gantry(&["slurm-install", "--prefix", bin.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let data = dir.join("data");
    let (_serve, url) = super::serve(&data);
    let slurm = |name: &str, args: &[&str]| {
        Command::new(bin.join(name))
            .args(args)
            .env("GANTRY_SERVER", &url)
            .env("GANTRY_DATA", &data)
            .env("USER", "root")
            .current_dir(&dir)
            .output()
            .expect("runs")
    };
    let out = slurm("sbatch", &["--wrap", "sleep 60", "-J", "sleeper", "--parsable"]);
    let id = stdout(&out).trim().to_string();
    assert!(id.parse::<u64>().is_ok(), "{}{}", stdout(&out), stderr(&out));
    let out = slurm("squeue", &["-j", &id]);
    let table = stdout(&out);
    assert!(table.starts_with("             JOBID PARTITION     NAME     USER ST"), "{table}");
    assert!(table.lines().nth(1).is_some_and(|l| l.contains(&id) && l.contains("sleeper")), "{table}");
    let out = slurm("scancel", &[&id]);
    assert!(out.status.success() && stdout(&out).is_empty(), "{}", stderr(&out));
    // A running job stops within its grace period; then it reads cancelled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let cancelled = loop {
        let line = stdout(&slurm("squeue", &["-j", &id, "-t", "all", "-h"]));
        if line.contains(" CA ") || std::time::Instant::now() > deadline {
            break line;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(cancelled.contains(" CA "), "cancelled: {cancelled}");
    // Held at submission (`-H`), it waits with Slurm's reason and no expected start.
    let held = stdout(&slurm("sbatch", &["-H", "--parsable", "--wrap", "true"])).trim().to_string();
    let start = stdout(&slurm("squeue", &["--start", "-j", &held]));
    assert!(start.contains("START_TIME") && start.contains("N/A") && start.contains("(JobHeldUser)"), "{start}");
    let out = slurm("squeue", &["--sort", "i"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("squeue: error: --sort: not supported by gantry's squeue"), "{}", stderr(&out));
    let out = slurm("scancel", &["999999"]);
    assert!(!out.status.success() && stderr(&out).contains("Kill job error on job id 999999"), "{}", stderr(&out));
    let out = gantry(&["slurm-install", "--prefix", bin.to_str().expect("utf-8")]);
    assert!(out.status.success(), "installing again replaces gantry's own links: {}", stderr(&out));
    std::fs::remove_file(bin.join("squeue")).expect("link");
    std::fs::write(bin.join("squeue"), "#!/bin/sh\n").expect("someone else's squeue");
    let out = gantry(&["slurm-install", "--prefix", bin.to_str().expect("utf-8")]);
    assert!(stderr(&out).contains("is not gantry's: left alone"), "{}", stderr(&out));
}

/// A controller with local agents on `fleet` (and `queues`), and Slurm's command names linked
/// to gantry in `bin`: what the Slurm tests run their commands against.
struct SlurmOnGantry {
    _serve: super::ServeGuard,
    url: String,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    data: std::path::PathBuf,
}

impl SlurmOnGantry {
    fn start(name: &str, fleet: &str, queues: Option<&str>) -> SlurmOnGantry {
        let dir = temp_dir(name);
        let bin = dir.join("bin");
        assert!(gantry(&["slurm-install", "--prefix", bin.to_str().expect("utf-8")]).status.success());
        let fleet = write_fixture(&dir, "fleet.toml", fleet);
        let data = dir.join("data");
        let mut args = vec!["serve", "--local", "--fleet", &fleet, "--listen", "127.0.0.1:0", "--data"];
        args.push(data.to_str().expect("utf-8"));
        let queues = queues.map(|q| write_fixture(&dir, "queues.toml", q));
        if let Some(q) = &queues {
            args.extend(["--queues", q.as_str()]);
        }
        let (_serve, url) = super::spawn(&args);
        SlurmOnGantry { _serve, url, dir, bin, data }
    }

    /// `cmd` set to reach this controller (gantry's Slurm commands first on its PATH), run
    /// from its directory.
    fn with_env(&self, mut cmd: Command) -> Command {
        let path = format!("{}:{}", self.bin.display(), std::env::var("PATH").unwrap_or_default());
        cmd.env("PATH", path)
            .env("GANTRY_SERVER", &self.url)
            .env("GANTRY_DATA", &self.data)
            .env("USER", "root")
            .env_remove("SLURM_CONF")
            .current_dir(&self.dir);
        cmd
    }

    /// Run Slurm command `name`: its exit code, stdout and stderr.
    fn run(&self, name: &str, args: &[&str]) -> (Option<i32>, String, String) {
        let out = self.with_env(Command::new(self.bin.join(name))).args(args).output().expect("runs");
        (out.status.code(), stdout(&out), stderr(&out))
    }
}

/// Two local "nodes" that resolve as host names on any machine, two L4s each.
const TWO_NODES: &str = "[[node]]\nname = \"localhost\"\ncpu = 16\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n\n\
    [[node]]\nname = \"127.0.0.1\"\ncpu = 16\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n";

/// Slurm's batch semantics: a batch job is an allocation whose script runs once, on its first
/// node, with all of that node's GPUs; `srun` in it starts the step's tasks across the
/// allocation (the second node's through its step host), each with its place (`SLURM_PROCID`,
/// `RANK`, `WORLD_SIZE`, ...) and, with `--gpus-per-task`, its own GPU; `srun` exits with the
/// highest exit code of its tasks. The two-node job is a `torchrun`-style Python program
/// printing its rank and world size.
#[test]
fn a_batch_script_runs_once_and_srun_steps_span_the_allocation() {
    let slurm = SlurmOnGantry::start("slurm-steps", TWO_NODES, None);
    let dir = slurm.dir.clone();
    let sbatch = |script: &str| {
        let (code, out, err) = slurm.run("sbatch", &["--wait", script]);
        assert_eq!(code, Some(0), "{script}: {out}{err}");
    };
    write_fixture(
        &dir,
        "one.sh",
        "#!/bin/bash\n#SBATCH --ntasks=2 --gres=gpu:2 --output=one.out\n\
         echo \"batch ntasks=$SLURM_NTASKS gpus=$CUDA_VISIBLE_DEVICES\"\n\
         srun -l bash -c 'echo \"task $SLURM_PROCID of $WORLD_SIZE sees $CUDA_VISIBLE_DEVICES\"' | sort\n\
         srun --gpus-per-task=1 bash -c 'echo \"bound $SLURM_LOCALID $CUDA_VISIBLE_DEVICES\"' | sort\n\
         srun -n 2 bash -c 'exit $((SLURM_PROCID + 2))'; echo \"srun exit $?\"\n",
    );
    sbatch("one.sh");
    let one = std::fs::read_to_string(dir.join("one.out")).expect("output");
    let lines: Vec<&str> = one.lines().collect();
    assert_eq!(lines.iter().filter(|l| l.starts_with("batch ")).count(), 1, "the script runs once: {one}");
    let both = lines[0].trim_start_matches("batch ntasks=2 gpus=");
    assert_eq!(both.split(',').count(), 2, "the script sees both GPUs: {one}");
    assert_eq!(lines[1], format!("0: task 0 of 2 sees {both}"), "{one}");
    assert_eq!(lines[2], format!("1: task 1 of 2 sees {both}"), "{one}");
    let gpus: Vec<&str> = both.split(',').collect();
    assert_eq!(lines[3], format!("bound 0 {}", gpus[0]), "one GPU each: {one}");
    assert_eq!(lines[4], format!("bound 1 {}", gpus[1]), "{one}");
    assert_eq!(lines[5], "srun exit 3", "the highest exit code: {one}");
    write_fixture(
        &dir,
        "rank.py",
        "import os\ne = os.environ\nprint(f\"rank {e['RANK']} of {e['WORLD_SIZE']} local {e['LOCAL_RANK']}/{e['LOCAL_WORLD_SIZE']} \
         node {e['SLURM_NODEID']} gpu {e['CUDA_VISIBLE_DEVICES']} port {e['MASTER_PORT']}\")\n",
    );
    write_fixture(
        &dir,
        "two.sh",
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2 --gpus-per-task=1 --output=two.out\n\
         echo \"nodes $SLURM_NNODES ntasks $SLURM_NTASKS per node $SLURM_TASKS_PER_NODE\"\nsrun python3 rank.py | sort\n",
    );
    sbatch("two.sh");
    let two = std::fs::read_to_string(dir.join("two.out")).expect("output");
    let lines: Vec<&str> = two.lines().collect();
    assert_eq!(lines[0], "nodes 2 ntasks 4 per node 2(x2)", "{two}");
    let ranks: Vec<String> =
        lines[1..].iter().map(|l| l.split(" gpu ").next().unwrap_or_default().to_string()).collect();
    assert_eq!(
        ranks,
        [
            "rank 0 of 4 local 0/2 node 0",
            "rank 1 of 4 local 1/2 node 0",
            "rank 2 of 4 local 0/2 node 1",
            "rank 3 of 4 local 1/2 node 1"
        ],
        "{two}"
    );
    let gpus: std::collections::BTreeSet<&str> = lines[1..].iter().filter_map(|l| l.split(" gpu ").nth(1)).collect();
    assert_eq!(gpus.len(), 4, "every rank its own GPU: {two}");
}

/// Each `srun` in a batch script is a job step sacct lists as `ID.N` beside `ID` and
/// `ID.batch`: its program, nodes, tasks, state and exit code, as Slurm's accounting shows them.
#[test]
fn sacct_lists_each_step_of_a_batch_job() {
    let slurm = SlurmOnGantry::start("slurm-sacct-steps", TWO_NODES, None);
    // The script also leaves an unfinished line on the descriptor the records go to: they
    // still start lines of their own.
    let script = "srun -N2 --ntasks-per-node=1 hostname > /dev/null; srun -n1 sh -c 'exit 3'; printf unfinished >&3";
    let (code, id, err) = slurm.run("sbatch", &["--parsable", "--wait", "-N2", "-o", "/dev/null", "--wrap", script]);
    assert_eq!(code, Some(0), "{err}");
    let id = id.trim().to_string();
    let (_, rows, err) =
        slurm.run("sacct", &["-j", &id, "-P", "-n", "-o", "JobID,JobName,State,ExitCode,NNodes,AllocCPUS"]);
    let rows: Vec<&str> = rows.lines().collect();
    assert_eq!(rows.len(), 4, "{rows:?} {err}");
    assert_eq!(rows[2], format!("{id}.0|hostname|COMPLETED|0:0|2|2"), "{rows:?}");
    assert_eq!(rows[3], format!("{id}.1|sh|FAILED|3:0|1|1"), "{rows:?}");
}

/// `srun` outside a batch job makes the allocation its options ask for and runs one step over
/// it, the output coming back here as it is written (stdout to stdout, stderr to stderr), and
/// ends with the step's exit code; `salloc COMMAND` runs the command once in the allocation,
/// its own `srun` starting steps; what needs a terminal is refused by name.
#[test]
fn srun_outside_a_job_and_salloc_run_in_an_allocation_of_their_own() {
    let slurm = SlurmOnGantry::start("slurm-attached", TWO_NODES, None);
    let (code, out, err) = slurm.run(
        "srun",
        &[
            "-N2",
            "--ntasks-per-node=2",
            "-l",
            "bash",
            "-c",
            "echo \"rank $SLURM_PROCID of $SLURM_NTASKS on node $SLURM_NODEID\"; echo oops >&2",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "0: rank 0 of 4 on node 0",
            "1: rank 1 of 4 on node 0",
            "2: rank 2 of 4 on node 1",
            "3: rank 3 of 4 on node 1"
        ],
        "{out}{err}"
    );
    assert_eq!(err.matches("oops").count(), 4, "each task's stderr comes back on stderr: {err}");
    let (code, _, err) = slurm.run("srun", &["-n", "2", "bash", "-c", "exit $((SLURM_PROCID + 3))"]);
    assert_eq!(code, Some(4), "the step's highest exit code: {err}");
    let (code, out, err) = slurm
        .run("salloc", &["-N2", "--gres=gpu:1", "bash", "-c", "echo \"once $SLURM_NNODES\"; srun hostname | wc -l"]);
    assert_eq!((code, out.as_str()), (Some(0), "once 2\n2\n"), "{err}");
    assert!(err.contains("salloc: Granted job allocation") && err.contains("salloc: Relinquishing"), "{err}");
    let (code, _, err) = slurm.run("srun", &["--pty", "bash"]);
    assert!(code == Some(1) && err.contains("--pty: gantry's srun forwards no terminal"), "{err}");
    let (code, _, err) = slurm.run("salloc", &["-N1"]);
    assert!(code == Some(1) && err.contains("no command to run"), "{err}");
    let (_, jobs, _) = slurm.run("squeue", &["-t", "all", "-h", "-O", "name:10,state:.12"]);
    assert!(jobs.contains("bash         COMPLETED") && jobs.contains("bash            FAILED"), "{jobs}");
}

/// `scancel --signal` leaves the job running: the signal reaches the job's steps (a
/// checkpoint request, say) and not its batch script — nor gantry's own processes, which it
/// would end — unless `--full`; the job then ends as it would have.
#[test]
fn scancel_signal_reaches_the_steps_and_with_full_the_batch_script() {
    let slurm = SlurmOnGantry::start("slurm-signal", TWO_NODES, None);
    let script = |name: &str| {
        format!(
            "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1 -o {name}.out\n\
             trap 'echo batch got USR1' USR1\n\
             srun -l bash -c 'trap \"echo step got USR1; exit 0\" USR1; echo ready; for i in $(seq 1 400); do sleep 0.05; done; echo missed'\n\
             echo batch done\n"
        )
    };
    for (name, full) in [("steps", false), ("full", true)] {
        write_fixture(&slurm.dir, &format!("{name}.sh"), &script(name));
        let (code, id, err) = slurm.run("sbatch", &["--parsable", &format!("{name}.sh")]);
        assert_eq!(code, Some(0), "{err}");
        let id = id.trim().to_string();
        let out = slurm.dir.join(format!("{name}.out"));
        let waited = std::time::Instant::now();
        while std::fs::read_to_string(&out).unwrap_or_default().matches("ready").count() < 2 {
            assert!(waited.elapsed().as_secs() < 20, "the steps never started: {:?}", std::fs::read_to_string(&out));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let mut args = vec!["--signal=USR1", id.as_str()];
        if full {
            args.insert(0, "--full");
        }
        let (code, _, err) = slurm.run("scancel", &args);
        assert_eq!(code, Some(0), "{err}");
        while !std::fs::read_to_string(&out).unwrap_or_default().contains("batch done") {
            assert!(waited.elapsed().as_secs() < 30, "the job never ended: {:?}", std::fs::read_to_string(&out));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let text = std::fs::read_to_string(&out).expect("output");
        assert!(text.contains("0: step got USR1") && text.contains("1: step got USR1"), "both steps' tasks: {text}");
        assert!(!text.contains("missed"), "{text}");
        assert_eq!(text.contains("batch got USR1"), full, "the batch script only with --full: {text}");
        // The script has printed its last line; its exit reaches the controller a heartbeat later.
        let state = loop {
            let (_, state, _) = slurm.run("sacct", &["-j", &id, "-X", "-n", "-P", "-o", "State,ExitCode"]);
            if !state.starts_with("RUNNING") || waited.elapsed().as_secs() >= 40 {
                break state;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        assert_eq!(state.trim(), "COMPLETED|0:0", "gantry's own processes survived it: {text}");
    }
    let (code, held, _) = slurm.run("sbatch", &["--parsable", "-H", "--wrap", "true"]);
    assert_eq!(code, Some(0));
    let (code, _, err) = slurm.run("scancel", &["-s", "USR1", held.trim()]);
    assert!(code == Some(1) && err.contains("only a running job can be signalled"), "{err}");
    let (code, _, err) = slurm.run("scancel", &["-s", "SEGV", held.trim()]);
    assert!(code == Some(1) && err.contains("Invalid job signal"), "{err}");
}

/// `sbatch --exclusive` gets whole nodes, as Slurm 22.05 allocates them (checked on the real
/// one: all four GPUs and eight CPUs for `--exclusive --gres=gpu:1`), and no other job runs
/// beside it.
#[test]
fn sbatch_exclusive_takes_whole_nodes() {
    let slurm = SlurmOnGantry::start("slurm-exclusive", TWO_NODES, None);
    let (code, id, err) = slurm.run(
        "sbatch",
        &[
            "--parsable",
            "--exclusive",
            "--gres=gpu:1",
            "-o",
            "ex.out",
            "--wrap",
            "echo $SLURM_GPUS_ON_NODE $SLURM_CPUS_ON_NODE $SLURMD_NODENAME; sleep 30",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let out = slurm.dir.join("ex.out");
    let waited = std::time::Instant::now();
    while std::fs::read_to_string(&out).unwrap_or_default().is_empty() {
        assert!(waited.elapsed().as_secs() < 20, "the exclusive job never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let seen = std::fs::read_to_string(&out).expect("output");
    let words: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(words[..2], ["2", "16"], "both GPUs and every CPU of its node: {seen}");
    let (code, small, err) =
        slurm.run("sbatch", &["--parsable", "--gres=gpu:1", "-o", "small.out", "--wrap", "echo $SLURMD_NODENAME"]);
    assert_eq!(code, Some(0), "{err}");
    let small_out = slurm.dir.join("small.out");
    while std::fs::read_to_string(&small_out).unwrap_or_default().is_empty() {
        assert!(waited.elapsed().as_secs() < 30, "the small job never ran beside it");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let small_node = std::fs::read_to_string(&small_out).expect("output");
    assert_ne!(small_node.trim(), words[2], "never on the exclusive job's node");
    let (code, _, err) = slurm.run("sbatch", &["--exclusive=user", "--wrap", "true"]);
    assert!(code == Some(1) && err.contains("--exclusive"), "{err}");
    let _ = (slurm.run("scancel", &[id.trim()]), small);
}

/// `sbatch --test-only` says when and where the job would start, in Slurm's words, and
/// submits nothing; behind a full fleet it says why it would wait; a job that can never run
/// is refused as a submission would be.
#[test]
fn sbatch_test_only_says_when_a_job_would_start_and_submits_nothing() {
    let slurm = SlurmOnGantry::start("slurm-test-only", TWO_NODES, None);
    let (code, _, err) = slurm.run("sbatch", &["--test-only", "--gres=gpu:1", "-c", "2", "--wrap", "true"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.starts_with("sbatch: Job 1 to start at 20") && err.contains("using 2 processors on nodes "), "{err}");
    assert!(err.trim_end().ends_with("in partition default"), "{err}");
    let (_, listed, _) = slurm.run("squeue", &["-t", "all", "-h"]);
    assert_eq!(listed, "", "nothing was submitted");
    let (code, _, err) = slurm.run("sbatch", &["-N2", "--gres=gpu:2", "-t", "10", "--wrap", "sleep 60"]);
    assert_eq!(code, Some(0), "{err}");
    let waited = std::time::Instant::now();
    while !slurm.run("squeue", &["-h", "-t", "R"]).1.contains(" R ") {
        assert!(waited.elapsed().as_secs() < 20, "the filler never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, _, err) = slurm.run("sbatch", &["--test-only", "--gres=gpu:1", "--wrap", "true"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("would wait") || (err.contains("to start at") && err.contains("not chosen yet")), "{err}");
    let (code, _, err) = slurm.run("sbatch", &["--test-only", "--gres=gpu:9", "--wrap", "true"]);
    assert!(code == Some(1) && err.contains("can never run"), "{err}");
}

/// `scontrol requeue` stops a running job and it runs again, knowing it was restarted
/// (`SLURM_RESTART_COUNT`); a job that is not running is refused with why.
#[test]
fn scontrol_requeue_runs_a_job_again() {
    let slurm = SlurmOnGantry::start("slurm-requeue", TWO_NODES, None);
    let (code, id, err) = slurm.run(
        "sbatch",
        &[
            "--parsable",
            "-o",
            "requeue.out",
            "--open-mode=append",
            "--wrap",
            "echo run ${SLURM_RESTART_COUNT:-0}; sleep 60",
        ],
    );
    assert_eq!(code, Some(1), "--open-mode is refused by name: {err}");
    let (code, id2, err) =
        slurm.run("sbatch", &["--parsable", "--wrap", "echo run ${SLURM_RESTART_COUNT:-0} >> requeue.out; sleep 60"]);
    assert_eq!(code, Some(0), "{id}{err}");
    let id = id2.trim().to_string();
    let out = slurm.dir.join("requeue.out");
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let waited = std::time::Instant::now();
    let wait_for = |text: &str| {
        while !read().contains(text) {
            assert!(waited.elapsed().as_secs() < 30, "never {text:?}: {:?}", read());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for("run 0");
    let (code, _, err) = slurm.run("scontrol", &["requeue", &id]);
    assert_eq!(code, Some(0), "{err}");
    wait_for("run 1");
    let (_, job, _) = slurm.run("scontrol", &["show", "job", &id]);
    assert!(job.contains("JobState=RUNNING") && job.contains("Restarts=1"), "{job}");
    let (code, _, err) = slurm.run("scancel", &[&id]);
    assert_eq!(code, Some(0), "{err}");
    // Who cancelled it, as sacct says it: the canceller's uid where this machine knows the
    // token's name as an account (the admin token's name is not one), else the name.
    let state = || slurm.run("sacct", &["-j", &id, "-X", "-n", "-P", "-o", "State"]).1.trim().to_string();
    while state() != "CANCELLED by admin" {
        assert!(waited.elapsed().as_secs() < 30, "never cancelled: {}", state());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, shown, _) = slurm.run("sacct", &["-j", &id, "-P", "-n", "-o", "JobID,State"]);
    assert!(shown.contains(&format!("{id}.batch|CANCELLED\n")), "the batch step says no more: {shown}");
    let (code, _, err) = slurm.run("scontrol", &["requeue", &id]);
    assert!(code == Some(1) && err.contains("only a running job can be requeued"), "{err}");
}

/// `sacct`, `sinfo`, `scontrol` and `scancel`'s ranges and arrays, as Slurm's answer: an
/// array's elements named `ID_INDEX` (one cancelled alone, the rest released together), a
/// failed job's exit code and a timed-out job's TIMEOUT in `sacct --parsable2`, the nodes with
/// their GRES, one job's and one node's record.
/// Partitions and accounts kept apart: `-p` picks the node set (and its time limit), `-A` the
/// queue charged, `--qos` a priority the queue file names; sinfo and scontrol list the file's
/// partitions, squeue and sacct show both; a partition's limits refuse a job with Slurm's words.
#[test]
fn partitions_accounts_and_qos_are_the_queue_files() {
    let fleet = TWO_NODES.replacen("cpu = 16\n", "cpu = 16\nlabels = { \"slurm.partition/gpu\" = \"true\" }\n", 1);
    let queues = "[[queue]]\nname = \"default\"\n[[queue]]\nname = \"physics\"\n\
        [[partition]]\nname = \"gpu\"\ndefault = true\nnode_selector = { \"slurm.partition/gpu\" = \"true\" }\nmax_time = \"2h\"\n\
        [[partition]]\nname = \"short\"\nmax_time = \"10m\"\nmax_nodes = 1\n\
        [[qos]]\nname = \"standby\"\npriority = -50\n";
    let cluster = SlurmOnGantry::start("slurm-partitions", &fleet, Some(queues));
    let slurm = |name: &str, args: &[&str]| cluster.run(name, args);
    let (_, listed, _) = slurm("sinfo", &["-h", "-o", "%P %l %D %N"]);
    assert_eq!(listed, "gpu* 2:00:00 1 localhost\nshort 10:00 2 localhost,127.0.0.1\n", "{listed}");
    let (_, shown, _) = slurm("scontrol", &["show", "partition", "short"]);
    assert!(
        shown.contains("PartitionName=short") && shown.contains("MaxNodes=1") && shown.contains("MaxTime=10:00"),
        "{shown}"
    );
    let (code, _, err) = slurm("scontrol", &["show", "partition", "nope"]);
    assert!(code != Some(0) && err.contains("Partition not found"), "{err}");
    // -p short -A physics --qos standby: the node set, the account and the priority apart.
    let (code, id, err) =
        slurm("sbatch", &["--parsable", "-H", "-p", "short", "-A", "physics", "--qos", "standby", "--wrap", "true"]);
    assert_eq!(code, Some(0), "{err}");
    let id = id.trim().to_string();
    let (_, row, _) = slurm("squeue", &["-h", "-j", &id, "-o", "%P %a %q %Q %l"]);
    assert_eq!(row, "short physics standby -50 10:00\n");
    // Neither named: the default partition and its time limit.
    let (_, plain, _) = slurm("sbatch", &["--parsable", "-H", "--wrap", "true"]);
    let plain = plain.trim().to_string();
    let (_, row, _) = slurm("squeue", &["-h", "-j", &plain, "-o", "%P %a %l"]);
    assert_eq!(row, "gpu default 2:00:00\n");
    let (_, rows, _) = slurm("sacct", &["-n", "-P", "-X", "--format=JobID,Partition,Account,QOS", "-j", &id]);
    assert_eq!(rows, format!("{id}|short|physics|standby\n"));
    let (_, mine, _) = slurm("squeue", &["-h", "-p", "short", "-o", "%i"]);
    assert_eq!(mine, format!("{id}\n"), "squeue -p filters by partition");
    // Past the partition's limits, or unknown names: refused with the reason, nothing made.
    for (args, words) in [
        (vec!["-p", "short", "-t", "20"], "above partition short's MaxTime"),
        (vec!["-p", "short", "-N", "2"], "partition short's MaxNodes is 1"),
        (vec!["-p", "long"], "invalid partition name \"long\" (partitions: gpu, short)"),
        (vec!["--qos", "high"], "invalid QOS \"high\" (QOS names: standby)"),
    ] {
        let mut argv = args.clone();
        argv.extend(["--wrap", "true"]);
        let (code, _, err) = slurm("sbatch", &argv);
        assert!(code != Some(0) && err.contains(words), "{args:?}: {err}");
    }
    let (_, all, _) = slurm("squeue", &["-h", "-t", "all", "-o", "%i"]);
    assert_eq!(all.lines().count(), 2, "refused jobs stored nothing: {all}");
}

#[test]
fn sacct_sinfo_scontrol_and_scancel_answer_as_slurms_do() {
    let cluster = SlurmOnGantry::start("slurm-commands", TWO_NODES, None);
    let slurm = |name: &str, args: &[&str]| cluster.run(name, args);
    let (_, array, _) = slurm("sbatch", &["--parsable", "--array=0-2", "-H", "-J", "arr", "--wrap", "true"]);
    let array = array.trim().to_string();
    let (code, _, err) = slurm("scancel", &[&format!("{array}_1")]);
    assert_eq!(code, Some(0), "{err}");
    let (_, listed, _) = slurm("squeue", &["-h", "-t", "all", "-j", &array]);
    let states: Vec<String> =
        listed.lines().map(|l| l.split_whitespace().take(5).collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(
        states,
        [
            format!("{array}_0 all arr admin PD"),
            format!("{array}_1 all arr admin CA"),
            format!("{array}_2 all arr admin PD")
        ]
        .map(|s| s.replace(" all ", " default ")),
        "{listed}"
    );
    let (code, _, err) = slurm("scontrol", &["release", &array]);
    assert_eq!(code, Some(0), "{err}");
    let (_, failed, _) = slurm("sbatch", &["--parsable", "--wait", "-J", "three", "--wrap", "exit 3"]);
    let failed = failed.lines().next().unwrap_or_default().trim().to_string();
    // A dependency that can never be met: pending, saying so, until cancelled (Slurm's default).
    let (_, never, _) = slurm("sbatch", &["--parsable", &format!("--dependency=afterok:{failed}"), "--wrap", "true"]);
    let never = never.trim().to_string();
    let (_, why, _) = slurm("squeue", &["-h", "-j", &never, "-o", "%i %T %r"]);
    assert_eq!(why, format!("{never} PENDING DependencyNeverSatisfied\n"));
    assert_eq!(slurm("scancel", &[&never]).0, Some(0));
    let (_, slow, _) = slurm("sbatch", &["--parsable", "--wait", "-J", "slow", "--time=0:02", "--wrap", "sleep 30"]);
    let slow = slow.lines().next().unwrap_or_default().trim().to_string();
    let (code, rows, err) =
        slurm("sacct", &["-P", "-X", "--format=JobID,JobName,State,ExitCode", "-j", &format!("{failed},{slow}")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rows, format!("JobID|JobName|State|ExitCode\n{failed}|three|FAILED|3:0\n{slow}|slow|TIMEOUT|0:15\n"));
    let (_, rows, _) = slurm("sacct", &["-n", "-P", "--format=JobID,State", "-j", &failed]);
    assert_eq!(rows, format!("{failed}|FAILED\n{failed}.batch|FAILED\n"), "the batch script's own row");
    let (_, nodes, _) = slurm("sinfo", &["-h", "-o", "%N %.6D %t %G"]);
    assert_eq!(nodes, "localhost,127.0.0.1      2 idle gpu:l4-24gb:2\n", "{nodes}");
    let (_, node, _) = slurm("scontrol", &["show", "node", "localhost"]);
    assert!(
        node.starts_with("NodeName=localhost\n") && node.contains("Gres=gpu:l4-24gb:2") && node.contains("State=IDLE"),
        "{node}"
    );
    let (_, job, _) = slurm("scontrol", &["show", "job", &slow]);
    assert!(job.contains(&format!("JobId={slow} JobName=slow")) && job.contains("JobState=TIMEOUT"), "{job}");
    let (_, names, _) = slurm("scontrol", &["show", "hostnames", "gpu-[01-02],login"]);
    assert_eq!(names, "gpu-01\ngpu-02\nlogin\n");
    let (code, _, err) = slurm("scancel", &["999990-999991"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err.lines().filter(|l| l.starts_with("scancel: error: Kill job error on job id 99999")).count(),
        2,
        "{err}"
    );
    // A feature no node has: refused at submission, saying the job can never run here.
    let (code, _, err) = slurm("sbatch", &["-C", "nvl72", "--wrap", "true"]);
    assert!(code == Some(1) && err.contains("can never run"), "{err}");
    let (code, _, err) = slurm("sacct", &["--format=JobID,Comment"]);
    assert!(code == Some(1) && err.contains("Invalid field requested: \"Comment\""), "{err}");
}

/// The batch scripts of `tools/slurm-compare/` under gantry's commands give what a real Slurm
/// gave (`tools/slurm-compare/expected/`, recorded from Debian's Slurm 22.05 on a private
/// two-node cluster), apart from the differences `differences.txt` lists with their reasons:
/// the variables each task saw, the output files' names and contents, the final states and
/// exit codes. (`10-timelimit` waits out a one-minute limit; the `sacct` test covers TIMEOUT.)
#[test]
fn the_slurm_comparison_scripts_behave_as_under_slurm() {
    // The reference cluster: nodes of 8 CPUs, 4000 MB and four GPUs; partitions debug and long.
    let fleet = TWO_NODES.replace("cpu = 16", "cpu = 8").replace("64GiB", "4000MiB").replace("count = 2", "count = 4");
    // Its partitions as tools/slurm-private.sh writes them: node sets with their time limits.
    let queues = "[[queue]]\nname = \"default\"\n\
        [[partition]]\nname = \"debug\"\ndefault = true\nmax_time = \"30m\"\n\
        [[partition]]\nname = \"long\"\nmax_time = \"1d\"\n";
    let slurm = SlurmOnGantry::start("slurm-compare", &fleet, Some(queues));
    // Job ids past the small numbers the harness would mistake for counts (`SLURM_NNODES=1`).
    let (_, burnt, _) = slurm.run("sbatch", &["--parsable", "-H", "--array=0-199", "--wrap", "true"]);
    assert_eq!(slurm.run("scancel", &[burnt.trim()]).0, Some(0));
    let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/slurm-compare");
    let scripts: Vec<String> = std::fs::read_dir(format!("{tools}/scripts"))
        .expect("scripts")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".sh").map(str::to_string))
        .filter(|name| name != "10-timelimit")
        .collect();
    let out = slurm.dir.join("out");
    let run = slurm
        .with_env(Command::new("bash"))
        .env_remove("USER")
        .arg(format!("{tools}/run.sh"))
        .arg(&out)
        .args(&scripts)
        .env("COMPARE_NODES", "localhost 127.0.0.1")
        .output()
        .expect("run.sh runs");
    assert!(run.status.success(), "{}{}", stdout(&run), stderr(&run));
    let compared = Command::new("bash")
        .arg(format!("{tools}/compare.sh"))
        .arg(format!("{tools}/expected"))
        .arg(&out)
        .output()
        .expect("compare.sh runs");
    assert!(
        compared.status.success(),
        "gantry differs from Slurm beyond differences.txt:\n{}{}",
        stdout(&compared),
        stderr(&compared)
    );
    assert_eq!(std::fs::read_dir(&out).expect("results").count(), scripts.len(), "a result for every script");
}

/// A private real Slurm, stopped (every daemon it started) when dropped.
struct PrivateSlurm {
    dir: std::path::PathBuf,
    conf: String,
}

impl PrivateSlurm {
    fn start(dir: std::path::PathBuf) -> PrivateSlurm {
        let tool = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/slurm-private.sh");
        let out = Command::new("bash").arg(tool).arg("start").arg(&dir).output().expect("slurm-private.sh runs");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        let conf = said.lines().find_map(|l| l.strip_prefix("export SLURM_CONF=")).map(str::to_string);
        let slurm = PrivateSlurm { dir, conf: conf.unwrap_or_default() };
        assert!(out.status.success() && !slurm.conf.is_empty(), "a private Slurm starts: {said}");
        slurm
    }
}

impl Drop for PrivateSlurm {
    fn drop(&mut self) {
        let tool = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/slurm-private.sh");
        let _ = Command::new("bash").arg(tool).arg("stop").arg(&self.dir).status();
    }
}

/// The reference gantry is compared with is still what a real Slurm does: Debian's slurmctld
/// and two slurmds (`tools/slurm-private.sh`, munge and all in a temporary directory) run
/// the quick comparison scripts, and their results equal `tools/slurm-compare/expected/`
/// exactly. Needs root (slurmd runs jobs as their users); CI runs as root.
#[test]
fn the_comparison_reference_is_what_a_real_slurm_does() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a private Slurm's daemons need root (CI runs as root)");
        return;
    }
    let dir = temp_dir("slurm-real");
    let slurm = PrivateSlurm::start(dir.join("cluster"));
    let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/slurm-compare");
    let scripts =
        ["01-env", "03-array", "06-srun-gres", "09-exit3", "13-error-output", "16-hold-release", "18-two-nodes"];
    let out = dir.join("out");
    let run = Command::new("bash")
        .arg(format!("{tools}/run.sh"))
        .arg(&out)
        .args(scripts)
        .env("SLURM_CONF", &slurm.conf)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env_remove("COMPARE_NODES")
        .output()
        .expect("run.sh runs");
    assert!(run.status.success(), "{}{}", stdout(&run), stderr(&run));
    for script in scripts {
        let name = format!("{script}.txt");
        let mut expected = std::fs::read_to_string(format!("{tools}/expected/{name}")).expect("reference");
        let mut got = std::fs::read_to_string(out.join(&name)).expect("result");
        // Which idle node a real slurmctld gives each array task depends on when its
        // scheduling passes run (seen: tasks 2 and 3 on the second node under CI load); the
        // array's variables are what is compared, not that placement.
        if script == "03-array" {
            for text in [&mut expected, &mut got] {
                *text = text.replace("<NODE2>", "<NODE1>");
            }
        }
        assert_eq!(got, expected, "{name}: the real Slurm no longer gives the recorded reference");
    }
    // What the running cluster's own commands list imports as a fleet: two nodes, four GPUs each.
    for (tool, args) in [("scontrol", vec!["show", "node"]), ("sinfo", vec!["-N", "-o", "%N %c %m %G %f"])] {
        let listed = Command::new(tool).args(&args).env("SLURM_CONF", &slurm.conf).output().expect("runs");
        assert!(listed.status.success(), "{tool}: {}", stderr(&listed));
        let file = write_fixture(&dir, &format!("{tool}.txt"), &stdout(&listed));
        let out = gantry(&["import", "slurm", "--conf", &file, "--map", "fake=L4-24GB"]);
        assert!(out.status.success(), "{tool}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("imported 2 node(s)") && stderr(&out).contains("no partitions"),
            "{}",
            stderr(&out)
        );
        let fleet = stdout(&out);
        assert_eq!(fleet.matches("count = 4").count(), 2, "{tool}: {fleet}");
    }
}
