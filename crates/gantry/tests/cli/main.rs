//! Runs the real `gantry` binary, as a user would, in a temporary directory.

use std::path::PathBuf;
use std::process::{Command, Output};

mod clock;
mod confinement;
mod postgres_restart;
mod prometheus;
mod remote_logs;
mod retention;
mod schemathesis;
mod slurm;
mod stale_attempt;

fn gantry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry")).args(args).output().expect("gantry runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory under the target dir (no tempfile crate needed for this).
/// Write `text` to `dir/name` and return the path as a string argument.
fn write_fixture(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("fixture");
    path.to_str().expect("utf-8 path").to_string()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn place_on_the_bundled_demo_shows_placements_and_reasons() {
    let out = gantry(&["place"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("llm-finetune"), "{text}");
    assert!(text.contains("mig 1g.10gb@"), "{text}");
    assert!(text.contains("not placed:"), "{text}");
    assert!(text.contains("jobs placed; GPU allocation"), "{text}");
}

#[test]
fn place_json_follows_the_documented_schema() {
    let out = gantry(&["place", "--json", "--policy", "best-fit", "--seed", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(report["schema"], "gantry.place/v1");
    assert_eq!(report["policy"], "best-fit");
    assert_eq!(report["seed"], 3);
    let jobs = report["jobs"].as_array().expect("jobs");
    assert!(jobs.iter().all(|j| j["status"] == "placed" || j["status"] == "unplaced"));
    let placed = jobs.iter().find(|j| j["status"] == "placed").expect("something placed");
    let task = &placed["tasks"][0];
    for key in ["group", "replica", "node", "cpu_milli", "memory_bytes", "gpus"] {
        assert!(!task[key].is_null(), "task lacks {key}: {task}");
    }
    let unplaced = jobs.iter().find(|j| j["status"] == "unplaced").expect("demo has an unplaceable job");
    let reason = &unplaced["reasons"][0];
    assert!(reason["reason"].is_string() && reason["message"].is_string() && reason["count"].is_u64(), "{reason}");
    let mps: Vec<&serde_json::Value> = jobs
        .iter()
        .flat_map(|j| j["tasks"].as_array().into_iter().flatten())
        .flat_map(|t| t["gpus"].as_array().into_iter().flatten())
        .filter(|g| g["kind"] == "mps")
        .collect();
    assert!(!mps.is_empty(), "the demo places MPS shares");
    for grant in mps {
        let milli = grant["milli"].as_u64().expect("milli");
        assert_eq!(grant["active_thread_percentage"].as_u64(), Some(milli.div_ceil(10)), "{grant}");
    }
    let summary = &report["summary"];
    assert_eq!(summary["jobs"].as_u64(), Some(jobs.len() as u64));
    assert!(summary["allocated_milli"].as_u64() <= summary["capacity_milli"].as_u64());
}

#[test]
fn the_same_seed_gives_the_same_output() {
    let a = gantry(&["place", "--json", "--policy", "random", "--seed", "11"]);
    let b = gantry(&["place", "--json", "--policy", "random", "--seed", "11"]);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn place_reads_user_files() {
    let dir = temp_dir("user-files");
    std::fs::write(
        dir.join("fleet.toml"),
        "[[node]]\nname = \"n\"\ncpu = 16\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("jobs.toml"),
        "[[job]]\nname = \"a\"\ngpu = { count = 2 }\n[[job]]\nname = \"b\"\ngpu = { count = 1 }\n",
    )
    .expect("write");
    let out = gantry(&[
        "place",
        "--fleet",
        dir.join("fleet.toml").to_str().expect("utf8"),
        "--workload",
        dir.join("jobs.toml").to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("1 of 2 jobs placed"), "{text}");
    assert!(text.contains("needs 1 free whole GPUs on one node, at most 0"), "{text}");
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let dir = temp_dir("bad-input");
    std::fs::write(dir.join("fleet.toml"), "[[node]]\nname = \"n\"\ncpu = 16\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-40GB\"\ncount = 1\nmig = [\"3g.20gb@0\", \"3g.20gb@4\", \"3g.20gb@0\", \"3g.20gb@4\"]\n").expect("write");
    std::fs::write(dir.join("jobs.toml"), "[[job]]\nname = \"a\"\ngpu = { count = 1 }\n").expect("write");
    std::fs::write(dir.join("binary.toml"), [0xff, 0xfe, 0x00, 0x41]).expect("write");
    let fleet = dir.join("fleet.toml");
    let jobs = dir.join("jobs.toml");
    let binary = dir.join("binary.toml");
    let cases: [(&str, Vec<&str>, &str); 6] = [
        (
            "illegal MIG layout",
            vec!["place", "--fleet", fleet.to_str().expect("utf8"), "--workload", jobs.to_str().expect("utf8")],
            "at most 2 fit (rule: max instances per profile)",
        ),
        (
            "missing file",
            vec!["place", "--fleet", "/nonexistent/fleet.toml", "--workload", jobs.to_str().expect("utf8")],
            "cannot read fleet file /nonexistent/fleet.toml",
        ),
        (
            "one of two files",
            vec!["place", "--fleet", fleet.to_str().expect("utf8")],
            "give both --fleet and --workload",
        ),
        ("not UTF-8", vec!["validate", "--workload", binary.to_str().expect("utf8")], "as UTF-8 text"),
        ("unknown policy", vec!["place", "--policy", "tetris"], "choose one of"),
        ("unknown model", vec!["catalog", "X9000"], "unknown GPU model \"X9000\""),
    ];
    for (name, args, needle) in cases {
        let out = gantry(&args);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{name}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{name}: printed to stdout on error");
    }
}

#[test]
fn validate_and_catalog_answer() {
    let out = gantry(&["validate", "--fleet", concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo-fleet.toml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("ok, 4 nodes, 28 GPUs"), "{}", stdout(&out));
    let out = gantry(&["catalog", "NVIDIA H100 80GB HBM3"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("3g.40gb"), "{}", stdout(&out));
    let out = gantry(&["catalog", "--json"]);
    let models: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(models.as_array().map(Vec::len), Some(16));
}

/// With both files, `validate` says which jobs the fleet could never run, and why, as `place`
/// would, and exits 1; a MIG job that fits once the GPUs are laid out for it is not one.
#[test]
fn validate_cross_checks_the_workload_against_the_fleet() {
    let dir = temp_dir("validate-cross");
    let l4 = write_fixture(
        &dir,
        "l4.toml",
        "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n",
    );
    let a100 = write_fixture(
        &dir,
        "a100.toml",
        "[[node]]\nname = \"a\"\ncpu = 64\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n",
    );
    let jobs = write_fixture(
        &dir,
        "jobs.toml",
        "[[job]]\nname = \"mig\"\ngpu = { mig = \"1g.10gb\" }\n[[job]]\nname = \"wide\"\ngpu = { count = 4 }\n\
         [[job]]\nname = \"h100\"\nmodel = [\"H100*\"]\ngpu = { count = 1 }\n[[job]]\nname = \"ok\"\ngpu = { count = 1 }\n",
    );
    let out = gantry(&["validate", "--fleet", &l4, "--workload", &jobs]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "job \"mig\" can never run on this fleet: MIG profile 1g.10gb",
        "job \"wide\" can never run on this fleet: needs 4 free whole GPUs on one node",
        "job \"h100\" can never run on this fleet: no GPU of model H100*",
        "3 of 4 jobs can never run",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    assert!(!text.contains("\"ok\""), "{text}");
    let out = gantry(&["validate", "--fleet", &a100, "--workload", &jobs]);
    assert!(stdout(&out).contains("job \"mig\" fits once GPUs are laid out"), "{}", stdout(&out));
    assert!(stdout(&out).contains("2 of 4 jobs can never run"), "{}", stdout(&out));
    let fine = write_fixture(&dir, "fine.toml", "[[job]]\nname = \"one\"\ngpu = { count = 1 }\n");
    let out = gantry(&["validate", "--fleet", &a100, "--workload", &fine]);
    assert!(out.status.success() && stdout(&out).contains("every job fits the empty fleet"), "{}", stdout(&out));
}

#[test]
fn help_has_examples() {
    let out = gantry(&["place", "--help"]);
    assert!(stdout(&out).contains("Examples:"), "{}", stdout(&out));
}

#[test]
fn sim_runs_policies_and_reports_bad_rows_with_their_line() {
    let dir = temp_dir("sim");
    let nodes = dir.join("nodes.csv");
    let pods = dir.join("pods.csv");
    std::fs::write(&nodes, "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\nn2,104000,524288,2,T4\n")
        .expect("write");
    std::fs::write(&pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,8000,30517,1,500,\np1,4000,16384,1,1000,\np2,12000,32768,0,0,\n").expect("write");
    let (n, p) = (nodes.to_str().expect("utf8"), pods.to_str().expect("utf8"));
    let out = gantry(&["sim", "--nodes", n, "--pods", p, "--policy", "fgd,best-fit", "--seed", "5", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let results = results.as_array().expect("one result per policy");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["policy"], "fgd");
    assert_eq!(results[0]["pods"], "pods", "each result names its pod list");
    assert!(results[0]["curve"].as_array().is_some_and(|c| !c.is_empty()));
    std::fs::write(
        &pods,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,8000,30517,1,500,\np1,4000,oops,1,1000,\nbig,4000,1024,16,1000,\nv100,4000,1024,1,1000,V100M16\np4,0.5,1024,1,1000,\n",
    )
    .expect("write");
    let out = gantry(&["sim", "--nodes", n, "--pods", p]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("pods.csv:3: `memory_mib` is \"oops\""), "{}", stderr(&out));
    let out = gantry(&["sim", "--nodes", n, "--pods", p, "--lenient"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Malformed rows counted apart from pods the node list cannot hold.
    assert!(
        stderr(&out).contains(
            "skipped 4 rows: 2 malformed (`cpu_milli` 1, `memory_mib` 1); 1 pod asks for a GPU model the fleet lacks; 1 pod larger than any node"
        ),
        "{}",
        stderr(&out)
    );
    std::fs::write(&pods, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np4,0.5,1024,1,1000\n").expect("write");
    let out = gantry(&["sim", "--nodes", n, "--pods", p]);
    assert!(stderr(&out).contains("`cpu_milli` is \"0.5\": that looks like cores"), "{}", stderr(&out));
    let missing = dir.join("missing.csv");
    let out = gantry(&["sim", "--nodes", n, "--pods", missing.to_str().expect("utf8")]);
    assert_eq!(stderr(&out).matches("No such file").count(), 1, "a missing file is reported once: {}", stderr(&out));
    std::fs::write(&nodes, "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G2\nn1,96000,393216,8,G2\n")
        .expect("write");
    let out = gantry(&["sim", "--nodes", n, "--pods", p]);
    assert!(
        stderr(&out).contains("nodes.csv:3: `sn` is \"n1\", a node name already used at line 2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn synth_writes_a_trace_that_sim_replays_with_a_report() {
    let dir = temp_dir("synth");
    let trace = dir.join("trace.jsonl");
    let t = trace.to_str().expect("utf-8 path");
    let out = gantry(&["synth", "--jobs", "300", "--seed", "3", "--tenants", "3", "--out", t]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&trace).expect("trace written");
    assert_eq!(text.lines().count(), 300);
    // Same seed, same bytes; another seed, another trace.
    assert_eq!(stdout(&gantry(&["synth", "--jobs", "300", "--seed", "3", "--tenants", "3"])), text);
    assert_ne!(stdout(&gantry(&["synth", "--jobs", "300", "--seed", "4", "--tenants", "3"])), text);

    let report = dir.join("report");
    let r = report.to_str().expect("utf-8 path");
    let out = gantry(&["sim", "--trace", t, "--policy", "default,best-fit", "--json", "--report", r]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON summary");
    let runs = runs.as_array().expect("one object per run");
    assert_eq!(runs.len(), 2);
    for run in runs {
        assert_eq!(run["trace"], "trace", "each result names its trace");
        assert_eq!(run["pods"], 300);
        assert_eq!(run["started"].as_u64().expect("count") + run["never_started"].as_u64().expect("count"), 300);
        let tenants = run["tenant_gpu_share_pct"].as_object().expect("tenant shares");
        assert_eq!(tenants.keys().collect::<Vec<_>>(), ["team-0", "team-1", "team-2"]);
        let util = run["mean_util_pct"].as_f64().expect("a number");
        assert!(util > 0.0 && util < run["mean_alloc_pct"].as_f64().expect("a number"), "{run}");
        assert!(!run["series"].as_array().expect("samples").is_empty());
    }
    let csv = std::fs::read_to_string(report.join("series.csv")).expect("series.csv");
    assert!(csv.starts_with("trace,policy,seed,time_s,alloc_pct,util_pct,running,queued\n"));
    assert!(csv.contains("\ntrace,best-fit,42,"), "{}", &csv[..200]);
    let svg = std::fs::read_to_string(report.join("trace.svg")).expect("chart");
    assert!(svg.starts_with("<svg") && svg.contains("default used") && svg.contains("stroke-dasharray"));
    let html = std::fs::read_to_string(report.join("report.html")).expect("report");
    assert!(html.contains("<svg") && html.contains("wait p99"), "self-contained, with the summary");
}

#[test]
fn sim_trace_refuses_bad_input_and_mismatched_flags() {
    let dir = temp_dir("sim-trace-bad");
    let good = r#"{"arrival_s": 0, "duration_s": 60, "job": {"name": "a", "gpu": {"count": 1}}}"#;
    let write = |name: &str, text: &str| write_fixture(&dir, name, text);
    let bad = write("bad.jsonl", &format!("{good}\n{{\"arrival_s\": -3, \"job\": {{\"name\": \"b\"}}}}\n"));
    let out = gantry(&["sim", "--trace", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.jsonl: line 2 / arrival_s: -3 is negative"), "{}", stderr(&out));
    let out = gantry(&["sim", "--trace", &bad, "--lenient"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("skipped 1 trace lines"), "{}", stderr(&out));
    // A job no node of the demo fleet can hold: strict names it, lenient skips it.
    let huge = write(
        "huge.jsonl",
        &format!("{good}\n{{\"arrival_s\": 5, \"job\": {{\"name\": \"big\", \"gpu\": {{\"count\": 64}}}}}}\n"),
    );
    let out = gantry(&["sim", "--trace", &huge]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 2 / job \"big\": can never run on this fleet"), "{}", stderr(&out));
    assert!(gantry(&["sim", "--trace", &huge, "--lenient"]).status.success());
    // A model the fleet lacks is counted apart from jobs too large (the fleet may be wrong).
    let t4 = write(
        "t4.jsonl",
        &format!(
            "{good}\n{{\"arrival_s\": 5, \"job\": {{\"name\": \"t4\", \"gpu\": {{\"count\": 1}}, \"model\": \"T4-16GB\"}}}}\n"
        ),
    );
    let out = gantry(&["sim", "--trace", &t4, "--lenient"]);
    assert!(stderr(&out).contains("1 × job asks for a GPU model the fleet lacks"), "{}", stderr(&out));
    let empty = write("empty.jsonl", "");
    assert!(stderr(&gantry(&["sim", "--trace", &empty])).contains("the trace has no jobs"));
    let good = write("good.jsonl", good);
    for (flags, expected) in [
        (vec!["--protocol", "fgd"], "--protocol fgd replays Alibaba pod lists"),
        (vec!["--markdown", "x.md"], "--markdown applies to Protocol A"),
        (vec!["--nodes", "n.csv"], "cannot be used with"),
    ] {
        let mut args = vec!["sim", "--trace", good.as_str()];
        args.extend(flags);
        let out = gantry(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
    }
    let out = gantry(&["sim"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--trace"), "{}", stderr(&out));
    let out = gantry(&["synth", "--load", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--load 0 must be in (0, 100]"), "{}", stderr(&out));
}

#[test]
fn sim_orders_the_queue_by_fair_share_from_a_queue_file() {
    let dir = temp_dir("sim-fair");
    let write = |name: &str, text: &str| write_fixture(&dir, name, text);
    let trace = write(
        "t.jsonl",
        r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "a", "queue": "x", "gpu": {"count": 1}}}
{"arrival_s": 1, "duration_s": 100, "job": {"name": "b", "queue": "y", "priority": 5, "gpu": {"count": 1}}}
"#,
    );
    let queues = write(
        "q.toml",
        "[fair_share]\nhalf_life = \"1h\"\n[[queue]]\nname = \"x\"\n[[queue]]\nname = \"y\"\nweight = 2\n",
    );
    let out = gantry(&["sim", "--trace", &trace, "--order", "fair-share", "--queues", &queues, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(runs[0]["order"], "fair-share");
    assert_eq!(runs[0]["started"], 2);
    // A queue file that breaks a rule, a job in no queue, --queues without fair share.
    let cyclic = write("c.toml", "[[queue]]\nname = \"x\"\nparent = \"y\"\n[[queue]]\nname = \"y\"\nparent = \"x\"\n");
    let out = gantry(&["sim", "--trace", &trace, "--order", "fair-share", "--queues", &cyclic]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("queue parents form a cycle"), "{}", stderr(&out));
    let only_x = write("x.toml", "[[queue]]\nname = \"x\"\n");
    let out = gantry(&["sim", "--trace", &trace, "--order", "fair-share", "--queues", &only_x]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("line 2 / job \"b\": unknown queue \"y\""), "{}", stderr(&out));
    let out = gantry(&["sim", "--trace", &trace, "--queues", &queues]);
    assert!(stderr(&out).contains("--queues is read by --order fair-share"), "{}", stderr(&out));
    // Guarantees the demo fleet cannot honour are warned about (the replay still runs), and
    // hostile durations are refused with their field.
    let over = write(
        "over.toml",
        "[[queue]]\nname = \"x\"\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 12 }]\n[[queue]]\nname = \"y\"\nquota = [{ flavor = \"H100-SXM5-80GB\", guaranteed = 8 }, { flavor = \"B200\", guaranteed = 1 }]\n",
    );
    let out = gantry(&["sim", "--trace", &trace, "--order", "fair-share", "--queues", &over]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: guarantees for H100-SXM5-80GB add up to 20 GPUs (x, y) but the fleet has 16"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("warning: queue y has a quota for B200"), "{}", stderr(&out));
    for (text, expected) in [
        (
            "[fair_share]\nreclaim_protect = \"-5m\"\n[[queue]]\nname = \"x\"\n",
            "fair_share.reclaim_protect: \"-5m\" is negative",
        ),
        ("[fair_share]\nreclaim_protect = \"soon\"\n[[queue]]\nname = \"x\"\n", "fair_share.reclaim_protect"),
        ("[fair_share]\nreclaim_protect = 1e99\n[[queue]]\nname = \"x\"\n", "reclaim_protect"),
    ] {
        let bad = write("bad.toml", text);
        let out = gantry(&["sim", "--trace", &trace, "--order", "fair-share", "--queues", &bad]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(stderr(&out).contains(expected), "{text}: {}", stderr(&out));
    }
}

#[test]
fn sim_time_replay_writes_every_start_stop_and_kill() {
    let dir = temp_dir("sim-events");
    let write = |name: &str, text: &str| write_fixture(&dir, name, text);
    let trace = write(
        "t.jsonl",
        r#"{"arrival_s": 0, "duration_s": 1000, "job": {"name": "low", "queue": "x", "grace": 10, "gpu": {"count": 8}, "model": ["H100*"]}}
{"arrival_s": 0, "duration_s": 1000, "job": {"name": "low2", "queue": "x", "grace": 10, "gpu": {"count": 8}, "model": ["H100*"]}}
{"arrival_s": 100, "duration_s": 50, "job": {"name": "urgent", "queue": "y", "priority": 5, "gpu": {"count": 8}, "model": ["H100*"]}}
"#,
    );
    let events = dir.join("events.csv");
    let out = gantry(&[
        "sim",
        "--trace",
        &trace,
        "--order",
        "fair-share",
        "--preempt",
        "--decisions-out",
        events.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(&events).expect("written");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "trace,policy,seed,time_s,event,job,queue,milli,preemptor,cause,kill_at_s");
    let stop = lines.iter().find(|l| l.contains(",stop,")).expect("a stop");
    assert!(stop.ends_with(",8000,urgent,priority,110"), "{stop}");
    assert!(lines.iter().any(|l| l.contains(",110,start,urgent,")), "{csv}");
    assert!(lines.iter().any(|l| l.contains(",110,kill,")), "{csv}");
}

/// `gantry sim --live` drives the live controller's state machine on the simulator's clock:
/// on traces whose jobs all have time limits (so both plan with the same ends) its starts,
/// stops, kills and endings are those of the engine-only time replay, event for event, in
/// every queue order, backfill and preemption mode.
#[test]
fn sim_live_decides_as_the_engine_only_replay_does() {
    let dir = temp_dir("sim-live");
    let synth = dir.join("synth.jsonl");
    let out =
        gantry(&["synth", "--jobs", "200", "--seed", "3", "--load", "1.2", "--out", synth.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Every job gets its duration as its time limit: the replay would otherwise plan with the
    // trace's durations, which a live controller cannot know.
    let mut limited = String::new();
    for line in std::fs::read_to_string(&synth).expect("trace").lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).expect("json");
        v["job"]["time_limit"] = serde_json::Value::String(format!("{}s", v["duration_s"]));
        limited += &format!("{v}\n");
    }
    let traces = [
        write_fixture(&dir, "synth-limited.jsonl", &limited),
        write_fixture(
            &dir,
            "preempt.jsonl",
            r#"{"arrival_s": 0, "duration_s": 1000, "job": {"name": "low", "queue": "x", "grace": 10, "time_limit": "1000s", "gpu": {"count": 8}, "model": ["H100*"]}}
{"arrival_s": 0, "duration_s": 1000, "job": {"name": "low2", "queue": "x", "grace": 10, "time_limit": "1000s", "gpu": {"count": 8}, "model": ["H100*"]}}
{"arrival_s": 100, "duration_s": 50, "job": {"name": "urgent", "queue": "y", "priority": 5, "time_limit": "50s", "gpu": {"count": 8}, "model": ["H100*"]}}
"#,
        ),
    ];
    let events = |trace: &str, modes: &[&str], live: bool| -> Vec<String> {
        let csv = dir.join("events.csv");
        let mut args = vec!["sim", "--trace", trace, "--seed", "0", "--decisions-out", csv.to_str().expect("utf-8")];
        args.extend_from_slice(modes);
        if live {
            args.push("--live");
        }
        let out = gantry(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = std::fs::read_to_string(&csv).expect("written");
        text.lines().skip(1).map(|l| l.split(',').skip(3).take(3).collect::<Vec<_>>().join(",")).collect()
    };
    let modes: [&[&str]; 5] = [
        &[],
        &["--backfill", "off"],
        &["--order", "fair-share"],
        &["--order", "fair-share", "--backfill", "reserve", "--reserve-depth", "4"],
        &["--order", "fair-share", "--preempt", "--backfill", "reserve"],
    ];
    for trace in &traces {
        for mode in modes {
            let replayed = events(trace, mode, false);
            assert!(!replayed.is_empty());
            assert_eq!(events(trace, mode, true), replayed, "{trace} {mode:?}");
        }
    }
    let preempted = events(&traces[1], &["--order", "fair-share", "--preempt"], true);
    assert!(
        preempted.contains(&"100,stop,low".to_string()) && preempted.contains(&"110,kill,low".to_string()),
        "{preempted:?}"
    );
}

#[test]
fn sim_backfill_modes_report_reservations() {
    let dir = temp_dir("sim-backfill");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        r#"{"arrival_s": 0, "duration_s": 100, "job": {"name": "a", "gpu": {"count": 8}, "model": "H100*"}}
{"arrival_s": 0, "duration_s": 100, "job": {"name": "b", "gpu": {"count": 8}, "model": "H100*"}}
{"arrival_s": 10, "duration_s": 50, "job": {"name": "gang", "task": [{"name": "w", "replicas": 2, "gpu": {"count": 8}, "model": "H100*"}]}}
{"arrival_s": 20, "duration_s": 500, "job": {"name": "long", "gpu": {"count": 4}, "model": "H100*"}}
"#,
    )
    .expect("fixture");
    let t = trace.to_str().expect("utf-8 path");
    let out = gantry(&["sim", "--trace", t, "--backfill", "reserve", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!((runs[0]["backfill"].as_str(), runs[0]["reserved_late"].as_u64()), (Some("reserve"), Some(0)));
    assert!(runs[0]["reserved"].as_u64().expect("count") >= 1);
    let out = gantry(&["sim", "--trace", t, "--backfill", "sometimes"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("possible values: off, greedy, reserve"), "{}", stderr(&out));
    // Stopped at 30 s: the gang waits with its reason and the start reserved for it.
    let out = gantry(&["sim", "--trace", t, "--backfill", "reserve", "--reserve-depth", "2", "--until", "30"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("jobs waiting at t=30s"), "{text}");
    assert!(
        text.lines().any(|l| l.contains("gang") && l.contains("100s") && l.contains("no node can hold it now")),
        "{text}"
    );
    for (flags, expected) in [
        (vec!["--reserve-depth", "2"], "--reserve-depth needs --backfill reserve"),
        (vec!["--backfill", "reserve", "--reserve-depth", "0"], "0 is not in 1..=64"),
        (vec!["--until", "soon"], "invalid value 'soon' for '--until <SECONDS>'"),
    ] {
        let mut args = vec!["sim", "--trace", t];
        args.extend(flags);
        let out = gantry(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    // As `gantry catalog | head -1`: the reader is gone before gantry writes.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("catalog")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("ends");
    assert_eq!(out.status.code(), Some(0));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// `gantry serve --local` as a user runs it, driven by the CLI: submit --wait, queue, why,
/// show, logs, cancel; Ctrl-C stops it.
/// Shell completion and man pages come from the command definitions (clap's generators); the
/// data directory follows XDG_DATA_HOME when GANTRY_DATA is not set.
#[test]
fn completions_man_pages_and_the_xdg_data_directory() {
    let bash = gantry(&["completions", "bash"]);
    assert_eq!(bash.status.code(), Some(0));
    let script = std::env::temp_dir().join(format!("gantry-completion-{}.bash", std::process::id()));
    std::fs::write(&script, &bash.stdout).expect("script");
    let checked = Command::new("bash").arg("-n").arg(&script).output().expect("bash runs");
    assert!(checked.status.success(), "bash -n: {}", stderr(&checked));
    assert!(stdout(&bash).contains("submit") && stdout(&bash).contains("--wait"), "the subcommands and flags");
    assert_eq!(gantry(&["completions", "tcsh"]).status.code(), Some(2), "an unknown shell is a usage error");
    let dir = std::env::temp_dir().join(format!("gantry-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(gantry(&["man", dir.to_str().expect("utf-8")]).status.code(), Some(0));
    let page = std::fs::read_to_string(dir.join("gantry-submit.1")).expect("a page per subcommand");
    assert!(page.starts_with(".ie") || page.contains(".TH gantry-submit"), "{page}");
    let xdg = std::env::temp_dir().join(format!("gantry-xdg-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("replay")
        .env_remove("GANTRY_DATA")
        .env("XDG_DATA_HOME", &xdg)
        .output()
        .expect("runs");
    assert!(stderr(&out).contains(&format!("{}/gantry/gantry.db", xdg.display())), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&script);
}

/// `gantry login URL` checks the controller answers the token, then saves URL, CA and token in
/// the client profile under $XDG_CONFIG_HOME: later commands reach that controller with no
/// flag or variable; a refused token saves nothing; a broken profile is said, naming it.
#[test]
fn login_saves_a_profile_later_commands_use() {
    let dir = temp_dir("login");
    let data = dir.join("data");
    let (_server, url) = serve(&data);
    let (config, home) = (dir.join("config"), dir.join("home"));
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(args)
            .env_remove("GANTRY_DATA")
            .env_remove("GANTRY_SERVER")
            .env_remove("GANTRY_TOKEN")
            .env_remove("GANTRY_CONFIG")
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &config)
            .output()
            .expect("runs")
    };
    let wrong = dir.join("wrong.token");
    std::fs::write(&wrong, "gty_nope\n").expect("token file");
    let out = run(&["login", &url, "--token-file", wrong.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(4), "refused (unauthenticated): {}", stderr(&out));
    assert!(!config.join("gantry/client.toml").exists(), "a refused token saves nothing");
    let token = data.join("admin.token");
    let out = run(&["login", &url, "--token-file", token.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let saved = config.join("gantry/client.toml");
    assert!(stdout(&out).contains(&saved.display().to_string()), "{}", stdout(&out));
    // No --server, no $GANTRY_*, no data directory under $HOME: the profile finds it.
    let out = run(&["queue", "--all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&saved, "server = 3\n").expect("broken");
    let out = run(&["queue"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("client.toml") && stderr(&out).contains("gantry login"), "{}", stderr(&out));
}

/// `gantry validate --json` says what it found as data, with the exit status of the text form.
#[test]
fn validate_speaks_json() {
    let out = gantry(&[
        "validate",
        "--fleet",
        "../../examples/demo-fleet.toml",
        "--workload",
        "../../examples/demo-workload.toml",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let found: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(found["fleet"]["nodes"], 4, "{found}");
    assert!(found["workload"]["jobs"].as_u64().is_some_and(|n| n > 5), "{found}");
    assert_eq!(found["workload"]["against_fleet"]["never"], serde_json::json!([]), "{found}");
}

#[test]
fn serve_local_runs_submitted_jobs_and_the_cli_reports_them() {
    let dir = temp_dir("serve-local");
    let data = dir.join("data");
    let (mut server, url) = serve(&data);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let cli = |args: &[&str]| {
        // Before any `--`: what follows it is the job's command.
        let mut all = vec![args[0], "--server", url.as_str(), "--token", token.as_str()];
        all.extend(&args[1..]);
        gantry(&all)
    };
    let job = dir.join("job.toml");
    std::fs::write(
        &job,
        "[[job]]\nname = \"probe\"\ngpu = { count = 1 }\nmodel = \"L4*\"\ncommand = \"echo got $CUDA_VISIBLE_DEVICES\"\n\
         [[job]]\nname = \"parked\"\nhold = true\n",
    )
    .expect("job file");
    let job = job.to_str().expect("utf-8");
    let out = cli(&["submit", job]);
    assert!(stdout(&out).contains("submitted 2 job(s): 1 2"), "{}{}", stdout(&out), stderr(&out));
    let why = cli(&["why", "2"]);
    assert_eq!(stdout(&why).trim(), "job 2 waits: held (release it to let it start)");
    let queue = stdout(&cli(&["queue"]));
    assert!(queue.lines().any(|l| l.contains("parked") && l.contains("pending") && l.contains("held")), "{queue}");
    // --wait on a job that completes, after the first has run.
    std::fs::write(dir.join("again.toml"), "[[job]]\nname = \"again\"\ncommand = \"true\"\n").expect("file");
    let wait = cli(&["submit", dir.join("again.toml").to_str().expect("utf-8"), "--wait"]);
    assert_eq!(wait.status.code(), Some(0), "{}", stderr(&wait));
    assert!(stderr(&wait).contains("job 3 again: completed"), "{}", stderr(&wait));
    let show = stdout(&cli(&["show", "1", "--json"]));
    let probe: serde_json::Value = serde_json::from_str(&show).expect("JSON");
    let device = probe["tasks"][0]["devices"][0].as_str().expect("a device").to_string();
    let logs = stdout(&cli(&["logs", "1"]));
    assert!(logs.contains(&format!("got {device}")), "{logs}");
    assert!(stdout(&cli(&["show", "1"])).contains("task main/0 on l4"), "the L4 node");
    assert_eq!(stdout(&cli(&["cancel", "2"])).trim(), "job 2: cancelled");
    let again = cli(&["cancel", "2"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("job 2 has already ended (cancelled) (HTTP 409)"), "{}", stderr(&again));
    // Several ids and ranges: each is tried, each failure said, the rest still cancelled.
    let several = cli(&["cancel", "1-2", "3"]);
    assert_eq!(several.status.code(), Some(2), "{}", stderr(&several));
    assert_eq!(stderr(&several).matches("has already ended").count(), 3, "{}", stderr(&several));
    assert!(cli(&["cancel", "3-1"]).status.code() == Some(2));
    let missing = cli(&["why", "42"]);
    assert!(stderr(&missing).contains("no job 42 (HTTP 404)"), "{}", stderr(&missing));
    // Exit codes tell failures apart (gantry_api::exit): not found, denied, unreachable.
    assert_eq!(missing.status.code(), Some(5), "not found");
    assert_eq!(cli(&["cancel", "42"]).status.code(), Some(5), "cancel of no such job");
    let stranger = gantry(&["why", "1", "--server", url.as_str(), "--token", "not-a-token"]);
    assert_eq!(stranger.status.code(), Some(4), "an unknown token: {}", stderr(&stranger));
    let down = gantry(&["queue", "--server", "http://127.0.0.1:9", "--token", "x"]);
    assert_eq!(down.status.code(), Some(3), "{}", stderr(&down));
    // Nodes, drain and resume.
    let nodes = stdout(&cli(&["nodes"]));
    assert!(nodes.lines().any(|l| l.starts_with("l4") && l.contains("GPUs")), "{nodes}");
    assert_eq!(stdout(&cli(&["drain", "l4"])).trim(), "node l4 drained: nothing new starts there");
    assert!(stdout(&cli(&["nodes"])).contains("l4 (drained)"));
    assert_eq!(stdout(&cli(&["resume", "l4"])).trim(), "node l4 resumed");
    // The planner's advice: whatever it says, it says it is advice.
    let advice = stdout(&cli(&["nodes", "--plan"]));
    assert!(advice.contains("planned for") && advice.contains("advice only"), "{advice}");
    let json: serde_json::Value = serde_json::from_str(&stdout(&cli(&["nodes", "--plan", "--json"]))).expect("json");
    assert!(json["reconfigure"].is_array() && json["demand_tasks"].is_u64(), "{json}");
    let ghost = cli(&["drain", "ghost"]);
    assert!(stderr(&ghost).contains("no node \"ghost\" (HTTP 404)"), "{}", stderr(&ghost));
    // Slurm habits: a batch script run from its directory, its output where --output says,
    // an unsupported option named, a dependency by job id, a missing --chdir said; and a
    // command line.
    let script = dir.join("batchy.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --job-name=batchy --gres=gpu:l4:1\n#SBATCH --time=5 --output=x-%j.log --mail-type=END\necho from-sbatch on $CUDA_VISIBLE_DEVICES in $(pwd)\n",
    )
    .expect("script");
    let sbatch = |args: &[&str]| {
        let mut all = vec!["sbatch", "--server", url.as_str(), "--token", token.as_str()];
        all.extend(args);
        Command::new(env!("CARGO_BIN_EXE_gantry")).args(&all).current_dir(&dir).output().expect("gantry runs")
    };
    let batch = sbatch(&["--wait", "batchy.sh"]);
    assert!(stdout(&batch).starts_with("Submitted batch job "), "Slurm's line: {}", stdout(&batch));
    assert_eq!(batch.status.code(), Some(0), "{}", stderr(&batch));
    assert!(stderr(&batch).contains("--mail-type=END is not supported by gantry sbatch"), "{}", stderr(&batch));
    let id = stdout(&batch).split_whitespace().last().expect("id").to_string();
    let written = std::fs::read_to_string(dir.join(format!("x-{id}.log"))).expect("--output=x-%j.log");
    let here = std::fs::canonicalize(&dir).expect("dir");
    assert!(
        written.starts_with("from-sbatch on GPU-") && written.contains(&format!("in {}", here.display())),
        "{written}"
    );
    std::fs::write(dir.join("after.sh"), format!("#!/bin/sh\n#SBATCH --dependency=afterok:{id}\necho after\n"))
        .expect("script");
    assert_eq!(sbatch(&["--wait", "after.sh"]).status.code(), Some(0), "runs after job {id}");
    let parsable = sbatch(&["--parsable", "--job-name=bare", "after.sh"]);
    assert!(stdout(&parsable).trim().parse::<u64>().is_ok(), "the bare id: {}", stdout(&parsable));
    let refused = sbatch(&["--mail-type=END", "after.sh"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--mail-type: not supported"), "{}", stderr(&refused));
    std::fs::write(dir.join("lost.sh"), "#!/bin/sh\n#SBATCH --chdir=/nonexistent/run\necho never\n").expect("script");
    let lost = sbatch(&["--wait", "lost.sh"]);
    assert_eq!(lost.status.code(), Some(1), "{}", stderr(&lost));
    let id = stdout(&lost).split_whitespace().last().expect("id").to_string();
    let logs = stdout(&cli(&["logs", &id]));
    assert!(logs.contains("working directory /nonexistent/run does not exist"), "{logs}");
    let direct = cli(&[
        "submit",
        "--gpus",
        "1",
        "--name",
        "direct",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo direct $GANTRY_WORLD_SIZE",
    ]);
    assert_eq!(direct.status.code(), Some(0), "{}", stderr(&direct));
    let id = stdout(&direct).split_whitespace().last().expect("id").to_string();
    assert!(stdout(&cli(&["logs", &id])).contains("direct 1"));
    let bad = cli(&["submit", "--gpus", "zero", "--", "true"]);
    assert!(stderr(&bad).contains("--gpus=zero: not a count"), "{}", stderr(&bad));
    // Tokens: a member of research sees none of the default queue's jobs; no token, no entry.
    let created = cli(&["token", "create", "alice", "--role", "member", "--queue", "research"]);
    let secret = stdout(&created).trim().to_string();
    assert!(secret.starts_with("gty_"), "{}", stderr(&created));
    assert!(
        stdout(&cli(&["token", "list"]))
            .lines()
            .any(|l| l.starts_with("alice") && l.contains("member") && l.contains("research"))
    );
    // A token for a month: its expiry in the list; a lifetime that is no duration is refused.
    let ci = cli(&["token", "create", "ci", "--role", "read-only", "--expires", "30d"]);
    assert!(ci.status.success(), "{}", stderr(&ci));
    let list = stdout(&cli(&["token", "list"]));
    let row = |name: &str| list.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert!(row("ci").contains(" UTC") && !row("ci").contains("EXPIRED"), "{list}");
    assert!(row("alice").contains("never"), "{list}");
    let soon = cli(&["token", "create", "later", "--role", "read-only", "--expires", "soon"]);
    assert!(!soon.status.success() && stderr(&soon).contains("--expires"), "{}", stderr(&soon));
    let short = cli(&["token", "create", "later", "--role", "read-only", "--expires", "5s"]);
    assert!(stderr(&short).contains("one minute to ten years"), "{}", stderr(&short));
    let as_alice = gantry(&["queue", "--all", "--server", url.as_str(), "--token", secret.as_str()]);
    assert_eq!(stdout(&as_alice).trim(), "no jobs", "{}", stderr(&as_alice));
    let anonymous = gantry(&["queue", "--server", url.as_str(), "--token", ""]);
    assert!(stderr(&anonymous).contains("(HTTP 401)"), "{}", stderr(&anonymous));
    // Ctrl-C stops it cleanly.
    let status = std::process::Command::new("kill").args(["-INT", &server.0.id().to_string()]).status().expect("kill");
    assert!(status.success());
    assert!(server.0.wait().expect("exits").success());
    let down = cli(&["queue"]);
    assert!(stderr(&down).contains("cannot reach the gantry controller"), "{}", stderr(&down));
}

/// A `gantry serve` process that is killed when the test ends, passing or not (a server left
/// behind would keep the test harness's output open).
struct ServeGuard(std::process::Child);

impl Drop for ServeGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `gantry serve --local` on `data`; returns the process and its URL.
fn serve(data: &std::path::Path) -> (ServeGuard, String) {
    serve_with_args(data, &[])
}

/// [`serve`] with more flags (`--queues FILE`).
fn serve_with_args(data: &std::path::Path, more: &[&str]) -> (ServeGuard, String) {
    let data = data.to_str().expect("utf-8");
    spawn(&[&["serve", "--local", "--listen", "127.0.0.1:0", "--data", data], more].concat())
}

/// Start a long-running `gantry` command (serve, agent); returns the process and the first
/// URL its banner names (the controller's address).
fn spawn(args: &[&str]) -> (ServeGuard, String) {
    spawn_with(args, &[])
}

/// [`spawn`] with extra environment variables. A controller serves plain HTTP on loopback
/// here (`--insecure-http`): these tests are about what it does, and each CLI call names its
/// server and token; HTTPS has its own tests ([`spawn_tls`]).
fn spawn_with(args: &[&str], envs: &[(&str, &str)]) -> (ServeGuard, String) {
    let plain: &[&str] = if args.first() == Some(&"serve") { &["--insecure-http"] } else { &[] };
    spawn_raw(&[args, plain].concat(), envs)
}

/// A controller as `gantry serve` starts by default: HTTPS from its data directory's CA.
fn spawn_tls(args: &[&str]) -> (ServeGuard, String) {
    spawn_raw(args, &[])
}

fn spawn_raw(args: &[&str], envs: &[(&str, &str)]) -> (ServeGuard, String) {
    use std::io::BufRead;
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    // Log lines may come first; the banner names the address.
    let mut reader = std::io::BufReader::new(server.stderr.take().expect("stderr"));
    let url = loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("stderr") > 0, "gantry {args:?} ended before its banner");
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://") || w.starts_with("https://")) {
            break url.trim_end_matches(',').to_string();
        }
    };
    // Keep draining its stderr so logging never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    (ServeGuard(server), url)
}

/// `serve --local --demo` on `data`, each demo step 0.25 s (10 s by default: the demo runs for
/// minutes).
fn demo_args(data: &std::path::Path) -> [&str; 9] {
    let data = data.to_str().expect("utf-8");
    ["serve", "--local", "--demo", "--demo-step", "0.25", "--listen", "127.0.0.1:0", "--data", data]
}

/// `gantry replay` on a controller's data directory: every decision of its log, across its
/// restarts, comes out identical.
fn assert_replays_identically(data: &std::path::Path) -> String {
    let out = gantry(&["replay", "--data", data.to_str().expect("utf-8")]);
    let text = stdout(&out);
    assert!(out.status.success() && text.contains("every decision replays identically"), "{text}{}", stderr(&out));
    text
}

/// A recorded live run with every kind of command — preemption (a requeue), a cancel of a
/// running and of a waiting job, a hold and a release, dependencies, token changes, a drain
/// and a resume, a controller kill -9 and restart — replays with every decision identical.
#[test]
fn a_recorded_run_with_every_kind_of_command_replays_identically() {
    let dir = temp_dir("replay-all");
    let write = |name: &str, text: &str| write_fixture(&dir, name, text);
    let fleet = write(
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n",
    );
    let queues = write("queues.toml", "[[queue]]\nname = \"default\"\n");
    let data = dir.join("data");
    let args = [
        "serve",
        "--local",
        "--fleet",
        &fleet,
        "--queues",
        &queues,
        "--preempt",
        "--listen",
        "127.0.0.1:0",
        "--data",
        data.to_str().expect("utf-8"),
    ];
    let (mut server, mut url) = spawn(&args);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let run = |url: &str, words: &[&str]| -> String {
        let out = gantry(&[words, &["--server", url, "--token", &token]].concat());
        assert!(out.status.success(), "{words:?}: {}", stderr(&out));
        stdout(&out)
    };
    let submit = |url: &str, text: &str| -> u64 {
        let file = write("w.toml", text);
        let out = run(url, &["submit", &file]);
        out.trim().rsplit([' ', '-']).next().and_then(|id| id.parse().ok()).expect("an id")
    };
    let state = |url: &str, id: u64| -> String {
        let job: serde_json::Value =
            serde_json::from_str(&run(url, &["show", &id.to_string(), "--json"])).expect("json");
        job["state"].as_str().unwrap_or_default().to_string()
    };
    let wait = |url: &str, id: u64, want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while state(url, id) != want {
            assert!(std::time::Instant::now() < deadline, "job {id} never became {want}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let low = submit(
        &url,
        "[[job]]\nname = \"low\"\ncount = 2\ngpu = { count = 1 }\ngrace = \"1s\"\ncommand = \"sleep 3\"\n",
    );
    wait(&url, low - 1, "running");
    wait(&url, low, "running");
    // A higher priority stops one of them (it waits again and reruns).
    let high = submit(&url, "[[job]]\nname = \"high\"\npriority = 10\ngpu = { count = 1 }\ncommand = \"true\"\n");
    wait(&url, high, "completed");
    let held = submit(&url, "[[job]]\nname = \"later\"\nhold = true\ngpu = { count = 1 }\ncommand = \"true\"\n");
    let deps = submit(
        &url,
        "[[job]]\nname = \"prep\"\ngpu = { count = 2 }\ncommand = \"true\"\n[[job]]\nname = \"train\"\nafter = [\"prep\"]\ncommand = \"true\"\n",
    );
    let doomed = submit(&url, "[[job]]\nname = \"doomed\"\ngpu = { count = 2 }\ncommand = \"true\"\n");
    run(&url, &["cancel", &doomed.to_string()]);
    run(&url, &["hold", &(deps - 1).to_string()]);
    run(&url, &["token", "create", "alice", "--role", "member", "--queue", "default"]);
    run(&url, &["token", "revoke", "alice"]);
    run(&url, &["drain", "n1"]);
    run(&url, &["resume", "n1"]);
    // The controller dies mid-run and comes back on the same store.
    server.0.kill().expect("SIGKILL");
    server.0.wait().expect("reaped");
    (server, url) = spawn(&args);
    run(&url, &["release", &(deps - 1).to_string()]);
    run(&url, &["release", &held.to_string()]);
    wait(&url, held, "completed");
    wait(&url, deps, "completed");
    let long = submit(&url, "[[job]]\nname = \"long\"\ngrace = \"1s\"\ncommand = \"sleep 30\"\n");
    wait(&url, long, "running");
    run(&url, &["cancel", &long.to_string()]);
    wait(&url, long, "cancelled");
    drop(server);
    let report = assert_replays_identically(&data);
    for kind in [
        "open 2",
        "submit 6",
        "cancel 2",
        "hold 1",
        "release 2",
        "create-token ",
        "revoke-token 1",
        "drain 2",
        "register 2",
        "heartbeat ",
    ] {
        assert!(report.contains(kind), "{kind:?} missing from {report}");
    }
    assert!(!report.contains(" 0 requeues"), "the preemption is in the log: {report}");
}

/// `gantry replay` against a log someone tampered with: an unreadable entry is an error (exit
/// 2), a changed decision is named as the first difference (exit 1), and so is a log whose
/// open entry is gone; an empty log says so, and a missing data directory is an error.
#[test]
fn replay_names_a_tampered_decision_and_refuses_an_unreadable_log() {
    let dir = temp_dir("replay-tampered");
    let data = dir.join("data");
    let args = ["serve", "--local", "--listen", "127.0.0.1:0", "--data", data.to_str().expect("utf-8")];
    let (server, url) = spawn(&args);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let workload =
        write_fixture(&dir, "w.toml", "[[job]]\nname = \"x\"\ncount = 3\ngpu = { count = 1 }\ncommand = \"true\"\n");
    let out = gantry(&["submit", &workload, "--server", &url, "--token", &token, "--wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    drop(server);
    let db = data.join("gantry.db");
    let replay = |dir: &std::path::Path| gantry(&["replay", "--data", dir.to_str().expect("utf-8")]);
    assert!(replay(&data).status.success(), "{}", stdout(&replay(&data)));
    let conn = rusqlite::Connection::open(&db).expect("opens");
    // An entry that is not JSON: an error, not a guess.
    let last: (i64, String) = conn
        .query_row("SELECT seq, body FROM commands ORDER BY seq DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("an entry");
    conn.execute("UPDATE commands SET body = 'not json' WHERE seq = ?1", [last.0]).expect("tampers");
    let out = replay(&data);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("does not read"), "{}", stderr(&out));
    conn.execute("UPDATE commands SET body = ?2 WHERE seq = ?1", rusqlite::params![last.0, last.1]).expect("restores");
    // The submit's fingerprint changed: the replay names that entry.
    let changed = conn
        .execute(
            "UPDATE commands SET body = json_set(body, '$.decisions', '0000000000000000') WHERE json_extract(body, '$.command') = 'submit'",
            [],
        )
        .expect("tampers");
    assert_eq!(changed, 1);
    let out = replay(&data);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("first difference: entry") && stdout(&out).contains("(submit at"),
        "{}",
        stdout(&out)
    );
    // A log that does not begin with an open (entries lost): named, not replayed blindly.
    conn.execute("DELETE FROM commands WHERE json_extract(body, '$.command') = 'open'", []).expect("tampers");
    let out = replay(&data);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("does not begin with an open entry"), "{}", stdout(&out));
    // A store from before the command log: nothing to replay, and it says so.
    conn.execute("DELETE FROM commands", []).expect("empties");
    let out = replay(&data);
    assert!(out.status.success() && stdout(&out).contains("the log is empty"), "{}", stdout(&out));
    let out = replay(&dir.join("nowhere"));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist: point --data at a controller's data directory"), "{}", stderr(&out));
}

/// The controller killed with SIGKILL at several moments of a 500-job run, restarted each
/// time: every job completes, and exactly once — counted from the tasks' own output.
#[test]
fn a_controller_killed_mid_run_loses_and_repeats_nothing() {
    let dir = temp_dir("kill-9");
    let data = dir.join("data");
    let ran = dir.join("ran.log");
    let workload = dir.join("many.toml");
    std::fs::write(
        &workload,
        format!(
            "[[job]]\nname = \"many\"\ncount = 500\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID >> {}\"\n",
            ran.display()
        ),
    )
    .expect("workload");
    let (mut server, url) = serve(&data);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let out = gantry(&["submit", workload.to_str().expect("utf-8"), "--server", &url, "--token", &token]);
    assert!(stdout(&out).contains("submitted 500 job(s)"), "{}", stderr(&out));
    let completed = |url: &str| -> usize {
        let out = gantry(&["queue", "--state", "completed", "--json", "--server", url, "--token", &token]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let mut url = url;
    for pause_ms in [150, 400, 90, 250] {
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        server.0.kill().expect("SIGKILL");
        server.0.wait().expect("reaped");
        (server, url) = serve(&data);
    }
    // A lost job shows as a stall: fail when nothing completes for a minute, not on a fixed
    // deadline a loaded 2-core CI machine can miss while every job is still progressing.
    let (mut done, mut last_progress) = (0, std::time::Instant::now());
    while done < 500 {
        let now_done = completed(&url);
        if now_done > done {
            (done, last_progress) = (now_done, std::time::Instant::now());
        }
        if last_progress.elapsed() >= std::time::Duration::from_secs(60) {
            // Say what the rest wait on, so a stall seen once on a loaded machine can be read.
            let rest = gantry(&["queue", "--server", &url, "--token", &token]);
            panic!("stalled at {done} of 500 completed; the rest:\n{}{}", stdout(&rest), stderr(&rest));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(server);
    let text = std::fs::read_to_string(&ran).expect("the tasks' own record");
    let mut ids: Vec<u64> = text.lines().map(|l| l.trim().parse().expect("a job id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=500).collect::<Vec<u64>>(), "every job ran exactly once");
    let report = assert_replays_identically(&data);
    assert!(report.contains("open 5") && report.contains("500 endings"), "{report}");
}

#[test]
fn discover_says_what_nvml_finds_or_why_not() {
    let out = gantry(&["discover"]);
    match out.status.code() {
        Some(0) => assert!(stdout(&out).contains("GPU(s)"), "{}", stdout(&out)),
        Some(1) => assert!(stderr(&out).contains("NVML"), "{}", stderr(&out)),
        other => panic!("unexpected exit {other:?}: {}", stderr(&out)),
    }
}

#[test]
fn serve_reads_a_config_file_and_refuses_a_bad_one() {
    use std::io::BufRead;
    let dir = temp_dir("serve-config");
    std::fs::write(dir.join("gantry.toml"), "listen = \"127.0.0.1:0\"\ndata = \"state\"\nlog_format = \"json\"\n")
        .expect("config");
    let mut server = ServeGuard(
        std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(["serve", "--local", "--config"])
            .arg(dir.join("gantry.toml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starts"),
    );
    let mut reader = std::io::BufReader::new(server.0.stderr.take().expect("stderr"));
    let banner = loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("stderr") > 0, "no banner");
        if line.contains("https://") {
            break line;
        }
    };
    assert!(banner.contains(&format!("data in {}", dir.join("state").display())), "{banner}");
    assert!(dir.join("state").join("admin.token").exists(), "the data directory is relative to the config file");
    drop(server);
    for (text, expected) in [
        ("backfill = \"sometimes\"\n", "backfill = \"sometimes\": use one of off, greedy, reserve"),
        ("colour = 1\n", "unknown field `colour`"),
        ("listen = \"nowhere\"\n", "gantry.toml"),
    ] {
        std::fs::write(dir.join("gantry.toml"), text).expect("config");
        let out = gantry(&["serve", "--local", "--config", dir.join("gantry.toml").to_str().expect("utf-8")]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(stderr(&out).contains(expected), "{text}: {}", stderr(&out));
    }
}

/// A controller with two remote agents (`gantry agent`, real processes on loopback): every
/// agent and then the controller are SIGKILLed mid-run and restarted; every job still runs
/// exactly once (counted from the tasks' own output), re-adopted rather than repeated.
#[test]
fn remote_agents_killed_and_restarted_repeat_nothing() {
    let dir = temp_dir("agents-kill-9");
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n\n\
         [[node]]\nname = \"n2\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n",
    )
    .expect("fleet");
    let ran = dir.join("ran.log");
    let workload = dir.join("jobs.toml");
    std::fs::write(
        &workload,
        format!(
            "[[job]]\nname = \"many\"\ncount = 40\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID >> {}; sleep 0.3\"\n",
            ran.display()
        ),
    )
    .expect("workload");
    // A fixed port: the agents must find the restarted controller at the same address.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let data = dir.join("controller");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let controller_args = ["serve", "--fleet", &path(&fleet), "--data", &path(&data), "--listen", &listen];
    let (mut controller, url) = spawn(&controller_args);
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    // One token per node, each in a file the agent reads (never on its command line).
    for node in ["n1", "n2"] {
        let name = format!("rack-{node}");
        let out =
            gantry(&["token", "create", &name, "--role", "agent", "--node", node, "--server", &url, "--token", &admin]);
        let secret = stdout(&out).lines().next().expect("the secret").trim().to_string();
        std::fs::write(dir.join(format!("{node}.token")), secret).expect("token file");
    }
    let agent = |node: &str| -> ServeGuard {
        let agent_data = path(&dir.join(format!("agent-{node}")));
        let token_file = path(&dir.join(format!("{node}.token")));
        let args =
            ["agent", "--server", &url, "--token-file", &token_file, "--inventory", &path(&fleet), "--node", node];
        spawn(&[&args[..], &["--data", &agent_data]].concat()).0
    };
    let mut agents = [agent("n1"), agent("n2")];
    let out = gantry(&["submit", &path(&workload), "--server", &url, "--token", &admin]);
    assert!(stdout(&out).contains("submitted 40 job(s)"), "{}", stderr(&out));
    let completed = || -> usize {
        let out = gantry(&["queue", "--state", "completed", "--json", "--server", &url, "--token", &admin]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let pause = |ms| std::thread::sleep(std::time::Duration::from_millis(ms));
    for (i, node) in ["n1", "n2"].into_iter().enumerate() {
        pause(500);
        agents[i].0.kill().expect("SIGKILL");
        agents[i].0.wait().expect("reaped");
        agents[i] = agent(node);
    }
    pause(400);
    controller.0.kill().expect("SIGKILL");
    controller.0.wait().expect("reaped");
    (controller, _) = spawn(&controller_args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while completed() < 40 {
        if std::time::Instant::now() > deadline {
            let others = gantry(&[
                "queue",
                "--state",
                "pending,running,failed,cancelled,lost",
                "--server",
                &url,
                "--token",
                &admin,
            ]);
            panic!("only {} of 40 completed; the others:\n{}", completed(), stdout(&others));
        }
        pause(200);
    }
    let nodes = gantry(&["nodes", "--server", &url, "--token", &admin]);
    assert!(stdout(&nodes).contains("% used (sim)"), "{}", stdout(&nodes));
    assert!(!stdout(&nodes).contains("not ready"), "{}", stdout(&nodes));
    if nix::unistd::geteuid().is_root() {
        // A root agent confines its tasks, says so, and each task's record says it too.
        assert_eq!(stdout(&nodes).matches("confinement: cgroup v").count(), 2, "{}", stdout(&nodes));
        let show = gantry(&["show", "1", "--server", &url, "--token", &admin]);
        assert!(stdout(&show).contains("[cgroup v"), "{}", stdout(&show));
    }
    drop((agents, controller));
    let text = std::fs::read_to_string(&ran).expect("the tasks' own record");
    let mut ids: Vec<u64> = text.lines().map(|l| l.trim().parse().expect("a job id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=40).collect::<Vec<u64>>(), "every job ran exactly once");
    let report = assert_replays_identically(&data);
    assert!(report.contains("register ") && report.contains("heartbeat "), "{report}");
}

/// `serve --local --demo` (the README's first command) submits the bundled demo jobs on the
/// demo fleet, and they run; a second start with the same store submits nothing again.
#[test]
fn serve_local_demo_submits_and_runs_the_demo_jobs_once() {
    let dir = temp_dir("serve-demo");
    let data = dir.join("data");
    let args = demo_args(&data);
    let (server, url) = spawn(&args);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let jobs = |state: &str| -> usize {
        let out = gantry(&["queue", "--state", state, "--json", "--server", &url, "--token", &token]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while jobs("completed") == 0 {
        assert!(std::time::Instant::now() < deadline, "no demo job completed");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(jobs("pending,running,completed,failed,cancelled,lost"), 25);
    // The demo reconfigures by itself: the 2g.20gb replicas wait for slices only one GPU has,
    // and the controller carves an idle A100 for them.
    let reconfigured = || {
        let out = gantry(&["nodes", "--reconfigurations", "--json", "--server", &url, "--token", &token]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).expect("json")
    };
    loop {
        let view = reconfigured();
        let served_waiting = view["recent"].as_array().into_iter().flatten().any(|r| {
            r["phase"] == "applied"
                && r["reason"].as_str().is_some_and(|w| w.contains("for waiting job") && w.contains("2g.20gb"))
        });
        if served_waiting {
            assert_eq!(view["mode"], "auto");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no reconfiguration for a waiting job: {view}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let text = stdout(&gantry(&["nodes", "--reconfigurations", "--server", &url, "--token", &token]));
    assert!(text.contains("reconfigure = \"auto\"") && text.contains("applied"), "{text}");
    // Chargeback of what ran: a CSV with a header and one line per queue, and a table. The
    // meter counts whole seconds: a job that began and ended within one may bill nothing, so
    // wait for the research queue's jobs to have run a second or more.
    let usage = || gantry(&["usage", "--by", "queue", "--csv", "--server", &url, "--token", &token]);
    while !stdout(&usage()).lines().any(|l| l.starts_with("research,")) {
        assert!(std::time::Instant::now() < deadline, "nothing metered: {}", stdout(&usage()));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let csv = usage();
    let text = stdout(&csv);
    assert!(text.starts_with("queue,allocated_gpu_hours,used_gpu_hours,utilization,"), "{text}{}", stderr(&csv));
    assert!(text.lines().any(|l| l.starts_with("research,")), "{text}");
    let table = stdout(&gantry(&[
        "usage", "--from", "-1d", "--to", "now", "--by", "model", "--server", &url, "--token", &token,
    ]));
    assert!(table.contains("ALLOC GPU-h") && table.contains("H100-SXM5-80GB") && table.contains("TOTAL"), "{table}");
    let bad = gantry(&["usage", "--from", "yesterday", "--server", &url, "--token", &token]);
    assert!(stderr(&bad).contains("--from: time \"yesterday\""), "{}", stderr(&bad));
    drop(server);
    let (server, url) = spawn(&args);
    let out = gantry(&[
        "queue",
        "--state",
        "pending,running,completed,failed,cancelled,lost",
        "--json",
        "--server",
        &url,
        "--token",
        &token,
    ]);
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(listed.as_array().map_or(0, Vec::len), 25, "not submitted twice");
    drop(server);
    assert_replays_identically(&data);
    let refused = gantry(&["serve", "--demo"]);
    assert!(stderr(&refused).contains("--local"), "{}", stderr(&refused));
}

/// An MPS share starts its GPU's MPS control daemon first (with that GPU's pipe directory)
/// and stops it after its last client; the client gets the same pipe directory. A stand-in
/// `nvidia-cuda-mps-control` on `$PATH` records how it was called.
#[test]
fn mps_shares_get_a_control_daemon_per_gpu() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("mps-daemon");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let calls = dir.join("calls.log");
    let fake = bin.join("nvidia-cuda-mps-control");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = -d ]; then echo \"start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY\" >> {0}; \
             else read cmd; echo \"$cmd $CUDA_VISIBLE_DEVICES\" >> {0}; fi\n",
            calls.display()
        ),
    )
    .expect("fake binary");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = dir.join("data");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let data_arg = data.to_str().expect("utf-8");
    let fleet = "../../examples/demo-fleet.toml";
    let args = ["serve", "--local", "--listen", "127.0.0.1:0", "--fleet", fleet, "--data", data_arg];
    let (server, url) = spawn_with(&args, &[("PATH", &path)]);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let workload = dir.join("mps.toml");
    std::fs::write(
        &workload,
        "[[job]]\nname = \"svc\"\ncount = 2\ngpu = { share = 250, memory = \"5GiB\", mode = \"mps\" }\n\
         command = \"echo pipe=$CUDA_MPS_PIPE_DIRECTORY pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; sleep 0.5\"\n",
    )
    .expect("workload");
    let out = gantry(&["submit", workload.to_str().expect("utf-8"), "--wait", "--server", &url, "--token", &token]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let logs = stdout(&gantry(&["logs", "1", "--server", &url, "--token", &token]));
    drop(server);
    let calls = std::fs::read_to_string(&calls).expect("the daemon was called");
    let starts: Vec<&str> = calls.lines().filter(|l| l.starts_with("start ")).collect();
    let quits = calls.lines().filter(|l| l.starts_with("quit ")).count();
    assert!(!starts.is_empty() && starts.len() == quits, "{calls}");
    let (gpu, pipe) = starts[0]["start ".len()..].split_once(' ').expect("uuid and pipe");
    assert!(gpu.starts_with("GPU-") && pipe.ends_with(&format!("mps/{gpu}")), "{calls}");
    assert!(logs.contains(&format!("pipe={pipe} pct=25 mem=0=5120M")), "{logs}");
}

/// Headless Chromium (Debian's `chromium`; `tools/install-test-deps.sh` installs it) against
/// a running controller with the demo workload: a browser logs in through the form, every
/// dashboard page loads behind the session and shows what it should (positions and expected
/// starts, reasons grouped, the sortable running table, per-queue charts with a range,
/// dates, auto-refresh); the session cookie is not the token; screenshots are taken. Then
/// the login's defences, over plain HTTP.
#[test]
fn dashboard_pages_render_in_headless_chromium() {
    let chromium = std::process::Command::new("chromium").arg("--version").output();
    assert!(
        chromium.is_ok_and(|o| o.status.success()),
        "the dashboard test needs Debian's chromium: run tools/install-test-deps.sh"
    );
    let dir = temp_dir("dashboard");
    let data = dir.join("data");
    let args = demo_args(&data);
    let (server, url) = spawn(&args);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    // `--demo` submits its workload after the banner, and only into an empty store: wait for
    // it, or the held job below would be job 1 and the demo never submitted.
    let listed = || {
        let out = gantry(&["queue", "--json", "--server", &url, "--token", &token]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while listed() == 0 {
        assert!(std::time::Instant::now() < deadline, "the demo workload was not submitted");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let held = dir.join("held.toml");
    std::fs::write(&held, "[[job]]\nname = \"waits-on-hold\"\nqueue = \"dev\"\nhold = true\n").expect("workload");
    let out = gantry(&["submit", held.to_str().expect("utf-8"), "--server", &url, "--token", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    let done = || {
        let out = gantry(&["show", "1", "--json", "--server", &url, "--token", &token]);
        stdout(&out).contains("\"completed\"")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "demo job 1 did not complete");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // A real browser logs in through the form (tools/browse.py drives Chromium over the
    // DevTools protocol) and visits each page.
    let shots = dir.join("browser");
    let browse = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/browse.py"))
        .args(["--url", &url, "--token-file", data.join("admin.token").to_str().expect("utf-8")])
        .args(["--out", shots.to_str().expect("utf-8")])
        .args(["/ui/fleet", "/ui/queue", "/ui/queue?sort=-gpus", "/ui/usage?range=hour", "/ui/usage", "/ui/jobs/1"])
        .env("BROWSE_PROFILE", dir.join("profile"))
        .output()
        .expect("browse.py runs");
    assert!(browse.status.success(), "{}", String::from_utf8_lossy(&browse.stderr));
    let dom = |name: &str| std::fs::read_to_string(shots.join(format!("{name}.html"))).expect(name);
    for (page, expected) in [
        (
            "ui-fleet",
            &[
                "<h1>Fleet</h1>",
                "h100-0",
                "a100-mixed",
                "class=\"mig\"",
                "Allocation and use, last hour",
                "what the online MIG planner would change now",
                "http-equiv=\"refresh\"",
            ][..],
        ),
        (
            "ui-queue",
            &[
                "Pending — why each waits",
                "waits-on-hold",
                "held",
                "none: held until released",
                "<th>Position</th>",
                "1 of ",
                "job waits: held",
                "GPU utilization",
                "href=\"/ui/queue?sort=-started\"",
                "no quota",
                " UTC",
            ][..],
        ),
        ("ui-queue-sort--gpus", &["GPUs ▼"][..]),
        ("ui-usage-range-hour", &["Range:", "Per queue, last hour", "a point every 10 seconds", "research"][..]),
        ("ui-usage", &["Usage", "By queue", "Cost by allocation", "Per queue, last 7 days"][..]),
        ("ui-jobs-1", &["Job 1 — llm-finetune", "completed", "stdout", "CUDA_VISIBLE_DEVICES=GPU-", "Confinement"][..]),
    ] {
        let dom = dom(page);
        // Where the nodes confine (root here, as in CI), the job shows what it used there.
        if page == "ui-jobs-1" && nix::unistd::geteuid().is_root() {
            for text in ["cgroup v", "Measured on its nodes", "Peak memory", "GPU utilization"] {
                assert!(dom.contains(text), "{page}: no {text:?} in\n{dom}");
            }
        }
        for text in expected {
            assert!(dom.contains(text), "{page}: no {text:?} in\n{dom}");
        }
    }
    // The running table sorted by GPUs, most first: the rows' whole-GPU counts never rise.
    // (Which demo jobs run when the browser looks depends on timing: at times only a MIG
    // slice, which has no count.)
    let sorted = dom("ui-queue-sort--gpus");
    let running = &sorted[sorted.find("<h2>Running</h2>").expect("running table")..];
    assert!(running.split("<tr>").count() > 2, "no running job:\n{running}");
    let whole_gpus: Vec<f64> = running
        .split("<tr>")
        .skip(2)
        .filter_map(|row| row.split("<td class=\"n\">").nth(1)?.split('<').next()?.parse().ok())
        .collect();
    assert!(whole_gpus.windows(2).all(|w| w[1] <= w[0]), "{whole_gpus:?}\n{running}");
    // The browser holds a session id, never the token, and scripts cannot read it.
    let cookies: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(shots.join("cookies.json")).expect("cookies")).expect("json");
    assert_eq!(cookies["after_login"], "/ui/fleet", "{cookies}");
    assert_eq!(cookies["document.cookie"], "", "{cookies}");
    let session = &cookies["cookies"][0];
    assert_eq!(
        (&session["name"], &session["httpOnly"], &session["secure"], &session["sameSite"]),
        (&"gantry_session".into(), &true.into(), &true.into(), &"Strict".into()),
        "{cookies}"
    );
    assert!(!session["value"].as_str().expect("value").contains(&token[4..]), "the cookie is not the token");
    let size = std::fs::metadata(shots.join("ui-fleet.png")).map_or(0, |m| m.len());
    assert!(size > 20_000, "a screenshot of the fleet page ({size} bytes)");
    dashboard_login_refuses_what_it_should(&url, &token);
    drop(server);
}

/// One HTTP/1.1 request by hand (headers included), for what a browser would send: the
/// status line and headers, and the body.
fn raw_http(url: &str, request: &str) -> (String, String) {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connects");
    stream.write_all(request.replace("HOST", address).as_bytes()).expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (head.to_ascii_lowercase(), body.to_string())
}

/// The dashboard's login, attacked: a token in the URL logs no one in, a login post without
/// the form's CSRF value is refused, every page forbids framing and script, and revoking a
/// token ends its sessions at once.
fn dashboard_login_refuses_what_it_should(url: &str, admin: &str) {
    let get = |path: &str, cookie: &str| {
        raw_http(url, &format!("GET {path} HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n{cookie}\r\n"))
    };
    let (head, _) = get(&format!("/ui/login?token={admin}&next=/ui/fleet"), "");
    assert!(head.starts_with("http/1.1 200") && !head.contains("gantry_session="), "{head}");
    for header in [
        "x-frame-options: deny",
        "content-security-policy: default-src 'none'",
        "frame-ancestors 'none'",
        "referrer-policy: no-referrer",
    ] {
        assert!(head.contains(header), "no {header:?} in {head}");
    }
    let csrf =
        head.split("gantry_login_csrf=").nth(1).and_then(|v| v.split(';').next()).expect("a CSRF cookie").to_string();
    let post = |body: String, cookie: &str| {
        raw_http(
            url,
            &format!(
                "POST /ui/login HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{cookie}\r\n{body}",
                body.len()
            ),
        )
    };
    // Another site's form: no CSRF cookie, or a value that does not match it.
    let (head, body) = post(format!("token={admin}&csrf={csrf}"), "");
    assert!(head.starts_with("http/1.1 403") && body.contains("log in again"), "{head}");
    let (head, _) = post(format!("token={admin}&csrf=forged"), &format!("Cookie: gantry_login_csrf={csrf}\r\n"));
    assert!(head.starts_with("http/1.1 403") && !head.contains("gantry_session="), "{head}");
    // A member's token logs in; revoked, its session sees nothing more.
    let out =
        gantry(&["token", "create", "viewer", "--role", "member", "--queue", "dev", "--server", url, "--token", admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let member = stdout(&out)
        .lines()
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("gty_")))
        .expect("secret")
        .to_string();
    let (head, _) = post(format!("token={member}&csrf={csrf}"), &format!("Cookie: gantry_login_csrf={csrf}\r\n"));
    let session =
        head.split("gantry_session=").nth(1).and_then(|v| v.split(';').next()).expect("a session").to_string();
    assert!(!session.contains(&member[4..]), "the session cookie is not the token");
    let cookie = format!("Cookie: gantry_session={session}\r\n");
    assert!(get("/ui/queue", &cookie).0.starts_with("http/1.1 200"));
    let out = gantry(&["token", "revoke", "viewer", "--server", url, "--token", admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (head, _) = get("/ui/queue", &cookie);
    assert!(head.starts_with("http/1.1 303") && head.contains("location: /ui/login"), "{head}");
}

/// `gantry advise` answers with a unit, why, and a workload line that `validate` accepts;
/// bad shapes are errors naming the flag.
#[test]
fn advise_recommends_a_unit_with_a_valid_workload_line() {
    let dir = temp_dir("advise");
    for (args, unit) in [
        (&["--purpose", "inference", "--size", "0.25", "--memory", "18GiB", "--latency-sensitive"][..], "mig"),
        (&["--purpose", "development", "--size", "0.125"][..], "time-slice"),
        (
            &["--purpose", "inference", "--size", "0.2", "--memory", "5GiB", "--trusted", "--isolation", "soft"][..],
            "mps",
        ),
        (&["--purpose", "training", "--size", "4"][..], "whole"),
    ] {
        let out = gantry(&[&["advise", "--json"][..], args].concat());
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let advice: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
        assert_eq!(advice["unit"], unit, "{args:?}: {advice}");
        let workload = dir.join(format!("{unit}.toml"));
        let spec = advice["spec"].as_str().expect("spec");
        std::fs::write(&workload, format!("[[job]]\nname = \"advised\"\n{spec}\n")).expect("workload");
        let valid = gantry(&["validate", "--workload", workload.to_str().expect("utf-8")]);
        assert!(valid.status.success(), "{spec}: {}", stderr(&valid));
    }
    let text = stdout(&gantry(&["advise", "--purpose", "inference", "--size", "0.3", "--bursty"]));
    assert!(text.contains("never given a hard MIG slice"), "{text}");
    for (args, message) in [
        (&["--purpose", "batch", "--size", "0"][..], "size 0"),
        (&["--purpose", "batch", "--size", "0.2", "--memory", "12XB"][..], "--memory: unknown memory unit"),
        (&["--purpose", "batch", "--size", "0.5", "--memory", "500GiB"][..], "does not fit on a H100-SXM5-80GB"),
        (&["--purpose", "batch", "--size", "0.5", "--model", "Z9000"][..], "unknown GPU model"),
        (&["--purpose", "gaming", "--size", "1"][..], "invalid value 'gaming'"),
    ] {
        let out = gantry(&[&["advise"][..], args].concat());
        assert!(!out.status.success() && stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
}

/// `gantry plan` partitions ten A100s for the issue's mix (4 training jobs, 20 inference
/// models, 30 notebooks): everything placed, and the written fleet file validates and holds
/// the mix when `place` runs on it; the exports are written; a profile no GPU has is refused.
#[test]
fn plan_partitions_a_fleet_for_a_mix_and_exports_it() {
    let dir = temp_dir("plan");
    let out = dir.join("plan");
    let run = gantry(&[
        "plan",
        "--fleet",
        "../../examples/plan-fleet.toml",
        "--workload",
        "../../examples/plan-mix.toml",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("json");
    assert_eq!(plan["placed"], 54, "{plan}");
    assert_eq!(plan["unplaced"], serde_json::json!([]), "{plan}");
    assert!(plan["allocation_pct"].as_f64().expect("number") > 90.0, "{plan}");
    let modes: Vec<&str> =
        plan["gpus"].as_array().expect("gpus").iter().map(|g| g["mode"].as_str().expect("mode")).collect();
    assert_eq!(modes.iter().filter(|m| m.starts_with("mig")).count(), 3, "{modes:?}");
    let fleet = out.join("fleet.toml");
    let valid = gantry(&["validate", "--fleet", fleet.to_str().expect("utf-8")]);
    assert!(valid.status.success(), "{}", stderr(&valid));
    let placed = gantry(&[
        "place",
        "--fleet",
        fleet.to_str().expect("utf-8"),
        "--workload",
        "../../examples/plan-mix.toml",
        "--json",
    ]);
    let placed: serde_json::Value = serde_json::from_str(&stdout(&placed)).expect("json");
    assert_eq!(placed["summary"]["unplaced"], 0, "{}", placed["summary"]);
    let mig = std::fs::read_to_string(out.join("mig-parted.yaml")).expect("mig-parted");
    assert!(mig.contains("mig-enabled: true") && mig.contains("\"2g.20gb\": 3"), "{mig}");
    let plugin = std::fs::read_to_string(out.join("device-plugin.yaml")).expect("device plugin");
    assert!(plugin.contains("timeSlicing") && plugin.contains("replicas: 16"), "{plugin}");
    let labels = std::fs::read_to_string(out.join("node-labels.sh")).expect("labels");
    assert!(labels.contains("nvidia.com/device-plugin.config=gantry-a100-4"), "{labels}");
    // The same plan for Slurm: NodeName lines with MIG types as AutoDetect=nvml names them.
    let slurm = std::fs::read_to_string(out.join("slurm-nodes.conf")).expect("slurm");
    assert!(slurm.contains("GresTypes=gpu") && slurm.contains("gpu:2g.20gb:"), "{slurm}");
    let gres = std::fs::read_to_string(out.join("gres.conf")).expect("gres");
    assert!(gres.contains("AutoDetect=nvml"), "{gres}");
    // A MIG profile no GPU of the fleet has: a clear error, nothing written.
    let l4 = dir.join("l4.toml");
    std::fs::write(
        &l4,
        "[[node]]\nname = \"l4\"\ncpu = 16\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n",
    )
    .expect("fleet");
    let bad = gantry(&["plan", "--fleet", l4.to_str().expect("utf-8"), "--workload", "../../examples/plan-mix.toml"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("no GPU model in the fleet supports"), "{}", stderr(&bad));
}

/// `gantry plan --evaluate` compares the online planner with the best static layout in the
/// simulator and says so in JSON; bad settings are refused before anything runs.
#[test]
fn plan_evaluate_compares_dynamic_planning_with_the_best_static_layout() {
    let run = gantry(&["plan", "--evaluate", "--days", "1", "--nodes", "2", "--seed", "3", "--json"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let out: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("json");
    let best = out["best_static"]["served_pct"].as_f64().expect("number");
    let dynamic = out["dynamic"]["served_pct"].as_f64().expect("number");
    let gain = out["gain_pct"].as_f64().expect("number");
    assert!((gain - (dynamic / best - 1.0) * 100.0).abs() < 1e-6, "{out}");
    assert!(out["dynamic"]["reconfigurations"].as_u64().expect("count") > 0, "{out}");
    assert_eq!(out["best_static"]["reconfigurations"], 0);
    assert!(out["statics"].as_array().expect("list").len() > 10);
    assert_eq!(out["config"]["move_work"], true);
    assert!(
        out["dynamic"]["moves_per_gpu_day"].as_f64().is_some() && out["dynamic"]["restart_gpu_h"].as_f64().is_some()
    );
    // Without moves, the planner moves nothing.
    let run = gantry(&["plan", "--evaluate", "--days", "1", "--nodes", "2", "--seed", "3", "--no-moves", "--json"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let still: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("json");
    assert_eq!(
        (&still["config"]["move_work"], &still["dynamic"]["moves"]),
        (&serde_json::json!(false), &serde_json::json!(0))
    );
    // Several weeks: each one's gain, and their summary; the first week is the run above.
    let run = gantry(&["plan", "--evaluate", "--days", "1", "--nodes", "2", "--seed", "3", "--seeds", "3", "--json"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let weeks: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("json");
    let list = weeks["weeks"].as_array().expect("list");
    let seeds: Vec<u64> = list.iter().map(|w| w["seed"].as_u64().expect("seed")).collect();
    assert_eq!(seeds, [3, 4, 5]);
    assert_eq!(list[0]["gain_pct"], out["gain_pct"], "same seed, same result");
    let gains: Vec<f64> = list.iter().map(|w| w["gain_pct"].as_f64().expect("gain")).collect();
    let mean = weeks["gain_pct"]["mean"].as_f64().expect("mean");
    assert!((mean - gains.iter().sum::<f64>() / 3.0).abs() < 1e-9, "{weeks}");
    assert_eq!(weeks["gain_pct"]["min"].as_f64(), gains.iter().copied().reduce(f64::min));
    assert_eq!(weeks["gain_pct"]["max"].as_f64(), gains.iter().copied().reduce(f64::max));
    for (args, says) in [
        (&["plan", "--evaluate", "--seeds", "0"][..], "--seeds"),
        (&["plan", "--workload", "../../examples/plan-mix.toml", "--seeds", "2"][..], "--seeds applies to --evaluate"),
        (&["plan", "--evaluate", "--load", "9"][..], "outside"),
        (&["plan", "--evaluate", "--days", "0"][..], "--days"),
        (&["plan", "--evaluate", "--restart-s", "100000"][..], "--restart-s"),
        (&["plan", "--workload", "../../examples/plan-mix.toml", "--no-moves"][..], "--no-moves applies to --evaluate"),
        (&["plan", "--evaluate", "--workload", "x.toml"][..], "cannot be used with"),
        (&["plan", "--days", "2"][..], "--workload"),
    ] {
        let bad = gantry(args);
        assert!(!bad.status.success() && stderr(&bad).contains(says), "{args:?}: {}", stderr(&bad));
    }
}

/// `gantry mig`: a malformed layout is refused before NVML is touched; on a machine without
/// a driver (CI) every action says so plainly and changes nothing.
#[test]
fn mig_refuses_bad_layouts_and_says_when_there_is_no_driver() {
    let bad = gantry(&["mig", "apply", "--gpu", "0", "--layout", "1g.10gb"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("PROFILE@START"), "{}", stderr(&bad));
    let bad = gantry(&["mig", "apply", "--gpu", "0", "--layout", "1g.10gb@nine"]);
    assert!(stderr(&bad).contains("not a slice number"), "{}", stderr(&bad));
    let show = gantry(&["mig", "show"]);
    if !show.status.success() {
        assert!(stderr(&show).contains("NVML is not available here"), "{}", stderr(&show));
        let dry = gantry(&["mig", "apply", "--gpu", "0", "--layout", "3g.40gb@0", "--dry-run"]);
        assert!(!dry.status.success() && stderr(&dry).contains("NVML is not available here"), "{}", stderr(&dry));
    }
}

/// `gantry plan --trace`: a trace's jobs count as often as they run at once (mean or peak),
/// and flags that belong to another mode are refused rather than ignored.
#[test]
fn plan_from_a_trace_counts_each_shape_by_its_concurrency() {
    let dir = temp_dir("plan-trace");
    let trace = dir.join("day.jsonl");
    std::fs::write(
        &trace,
        "{\"arrival_s\": 0, \"duration_s\": 500, \"job\": {\"name\": \"a\", \"gpu\": {\"mig\": \"1g.10gb\"}}}\n\
         {\"arrival_s\": 100, \"duration_s\": 500, \"job\": {\"name\": \"b\", \"gpu\": {\"mig\": \"1g.10gb\"}}}\n\
         {\"arrival_s\": 0, \"duration_s\": 1000, \"job\": {\"name\": \"w\", \"gpu\": {\"count\": 1}}}\n",
    )
    .expect("trace");
    let trace = trace.to_str().expect("utf-8");
    let fleet = "../../examples/plan-fleet.toml";
    for (demand, placed) in [("mean", 2), ("peak", 3)] {
        let run = gantry(&["plan", "--fleet", fleet, "--trace", trace, "--demand", demand, "--json"]);
        assert!(run.status.success(), "{}", stderr(&run));
        let plan: serde_json::Value = serde_json::from_str(&stdout(&run)).expect("json");
        assert_eq!(plan["placed"], placed, "{demand}: {plan}");
        assert!(plan["workload"].as_str().expect("name").contains(&format!("{demand} concurrency")), "{plan}");
    }
    for (args, says) in [
        (
            &["plan", "--workload", "../../examples/plan-mix.toml", "--demand", "peak"][..],
            "--demand applies to --trace",
        ),
        (&["plan", "--workload", "../../examples/plan-mix.toml", "--seed", "3"][..], "--seed applies to --evaluate"),
        (&["plan", "--trace", "/nonexistent.jsonl"][..], "cannot read trace"),
    ] {
        let bad = gantry(args);
        assert!(!bad.status.success() && stderr(&bad).contains(says), "{args:?}: {}", stderr(&bad));
    }
}

/// An agent's secret never travels on its command line (other users read argv): `--token` is
/// refused with the way to give it, and an empty or missing token file says so.
#[test]
fn an_agent_refuses_a_secret_on_its_command_line() {
    let dir = temp_dir("agent-secret");
    let fleet = write_fixture(
        &dir,
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"32GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n",
    );
    let base = ["agent", "--server", "http://127.0.0.1:9", "--inventory", &fleet];
    let out = gantry(&[&base[..], &["--token", "gty_secret"]].concat());
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("--token-file FILE or $GANTRY_TOKEN, not from --token"), "{}", stderr(&out));
    let empty = write_fixture(&dir, "empty.token", "\n");
    let out = gantry(&[&base[..], &["--token-file", &empty]].concat());
    assert!(stderr(&out).contains("the agent token is empty"), "{}", stderr(&out));
    let missing = dir.join("missing.token");
    let out = gantry(&[&base[..], &["--token-file", missing.to_str().expect("utf-8")]].concat());
    assert!(stderr(&out).contains("cannot read"), "{}", stderr(&out));
}

/// `http://` to another machine would put the token on the network in the clear: the CLI and
/// the agent refuse before connecting, unless told `--insecure-http`.
#[test]
fn a_client_sends_no_token_in_the_clear_to_another_machine() {
    let dir = temp_dir("plain-http");
    let fleet = write_fixture(
        &dir,
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"32GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n",
    );
    let token = write_fixture(&dir, "agent.token", "gty_secret\n");
    // 0.0.0.0 is not loopback by name, yet connecting to it reaches this machine at once.
    let remote = "http://0.0.0.0:9";
    for args in [
        vec!["queue", "--server", remote, "--token", "gty_secret"],
        vec!["agent", "--server", remote, "--inventory", &fleet, "--token-file", &token],
    ] {
        let out = gantry(&args);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("in the clear") && stderr(&out).contains("--insecure-http"), "{}", stderr(&out));
    }
    // Told so, the CLI goes ahead (and finds nothing listening).
    let out = gantry(&["queue", "--server", remote, "--token", "gty_secret", "--insecure-http"]);
    assert!(!out.status.success());
    assert!(!stderr(&out).contains("in the clear"), "{}", stderr(&out));
}

/// A controller started with `--data DIR`: the CLI finds its admin token with `--data DIR`;
/// pointed elsewhere it says where its token came from and how to point it. `bearer` in any
/// case is accepted, and a completed job shows exit code 0.
#[test]
fn the_cli_finds_the_controller_it_was_started_with_and_says_where_it_looked() {
    let dir = temp_dir("find-token");
    let data = dir.join("data");
    let (_server, url) = serve(&data);
    let data = data.to_str().expect("utf-8");
    let elsewhere = dir.join("elsewhere");
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args(args)
            .env("GANTRY_DATA", &elsewhere)
            .env_remove("GANTRY_TOKEN")
            .output()
            .expect("gantry runs")
    };
    let out = cli(&["queue", "--server", &url]);
    assert!(!out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("HTTP 401") && err.contains("elsewhere/admin.token") && err.contains("--data DIR"), "{err}");
    let workload = write_fixture(&dir, "ok.toml", "[[job]]\nname = \"ok\"\ncommand = \"true\"\n");
    let out = cli(&["submit", &workload, "--wait", "--server", &url, "--data", data]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(&["show", "1", "--server", &url, "--data", data]);
    assert!(stdout(&out).contains("exit code 0"), "{}", stdout(&out));
    let token = std::fs::read_to_string(dir.join("data/admin.token")).expect("token");
    let (status, _) = gantry_wire::client::request(&url, None, "GET", "/v1/jobs", None).expect("reaches");
    assert_eq!(status, 401);
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).expect("connects");
    use std::io::{Read, Write};
    write!(
        stream,
        "GET /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: bearer {}\r\nConnection: close\r\n\r\n",
        token.trim()
    )
    .expect("sends");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reads");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

/// `gantry serve` speaks HTTPS by default: the first start makes a CA in the data directory
/// and prints its fingerprint; the CLI pointed at that directory verifies the controller with
/// it; a CA that did not sign it is refused with a hint; plain HTTP to the TLS port gets a JSON
/// 400 that says to use https; `gantry cert` issues a node's client certificate once and refuses to overwrite it.
#[test]
fn serve_speaks_https_from_its_own_ca_and_refuses_what_it_cannot_verify() {
    let dir = temp_dir("tls");
    let data = dir.join("data");
    let data_arg = data.to_str().expect("utf-8");
    let (_server, url) = spawn_tls(&["serve", "--local", "--listen", "127.0.0.1:0", "--data", data_arg]);
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let out = gantry(&["queue", "--server", &url, "--data", data_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fingerprint = stdout(&gantry(&["cert", "fingerprint", "--data", data_arg]));
    assert_eq!(fingerprint.split(':').count(), 32, "{fingerprint}");
    // Another controller's CA: refused, with what to do.
    let other = dir.join("other");
    let other_arg = other.to_str().expect("utf-8");
    let (_other, _) = spawn_tls(&["serve", "--local", "--listen", "127.0.0.1:0", "--data", other_arg]);
    let wrong_ca = other.join("ca.pem");
    let out = gantry(&["queue", "--server", &url, "--data", data_arg, "--ca", wrong_ca.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("invalid peer certificate") && stderr(&out).contains("hint:"), "{}", stderr(&out));
    // Plain HTTP to the TLS port.
    let plain = url.replace("https://", "http://");
    let out = gantry(&["queue", "--server", &plain, "--data", data_arg]);
    assert!(stderr(&out).contains("speaks HTTPS only") && stderr(&out).contains("HTTP 400"), "{}", stderr(&out));
    // A client certificate for a node, once.
    let certs = dir.join("certs");
    let certs_arg = certs.to_str().expect("utf-8");
    let fleet = write_fixture(
        &dir,
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"32GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n",
    );
    // Only for a node of the fleet: another name gets nothing, and says which nodes there are.
    let stranger = gantry(&["cert", "agent", "n9", "--fleet", &fleet, "--data", data_arg, "--out", certs_arg]);
    assert!(!stranger.status.success());
    assert!(
        stderr(&stranger).contains("\"n9\" is not in") && stderr(&stranger).contains("n1"),
        "{}",
        stderr(&stranger)
    );
    assert!(!certs.join("n9.key").exists() && !certs.join("n9.pem").exists());
    let unsaid = gantry(&["cert", "agent", "n1", "--data", data_arg, "--out", certs_arg]);
    assert!(!unsaid.status.success() && stderr(&unsaid).contains("--fleet"), "{}", stderr(&unsaid));
    let out = gantry(&["cert", "agent", "n1", "--fleet", &fleet, "--data", data_arg, "--out", certs_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mode =
        |p: PathBuf| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).expect("exists").permissions());
    assert_eq!(mode(certs.join("n1.key")) & 0o777, 0o600);
    let again = gantry(&["cert", "agent", "n1", "--fleet", &fleet, "--data", data_arg, "--out", certs_arg]);
    assert!(!again.status.success() && stderr(&again).contains("must not exist yet"), "{}", stderr(&again));
}

/// Start a long-running `gantry` command and return once a stderr line contains `needle`
/// (a standby prints no URL until it leads); its later lines arrive on the receiver.
fn spawn_until(args: &[&str], needle: &str) -> (ServeGuard, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut reader = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    loop {
        let mut line = String::new();
        assert!(reader.read_line(&mut line).expect("stderr") > 0, "gantry {args:?} ended before {needle:?}");
        if line.contains(needle) {
            break;
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (ServeGuard(child), rx)
}

/// Two controllers on one PostgreSQL (a private server): the leader is killed with -9 in the
/// middle of a run; the standby leads within 10 s, the agent follows it (it was given both
/// URLs), the jobs that were running are re-adopted, not started again, and every job runs
/// exactly once. The CLI, given both URLs, submits through whichever leads. Then the new
/// leader is paused past its lease and replaced in turn.
#[test]
fn a_standby_takes_over_from_a_killed_leader_and_nothing_runs_twice() {
    let pg = gantry_store::test_postgres::TestPostgres::start("failover").expect("a private PostgreSQL");
    let store = pg.create_database("gantry").expect("a database");
    let dir = temp_dir("failover");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let fleet = dir.join("fleet.toml");
    std::fs::write(
        &fleet,
        "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n",
    )
    .expect("fleet");
    let ran = dir.join("ran.log");
    let workload = dir.join("jobs.toml");
    std::fs::write(
        &workload,
        format!(
            "[[job]]\nname = \"w\"\ncount = 12\ngpu = {{ count = 1 }}\ncommand = \"echo $GANTRY_JOB_ID >> {}; sleep 1.5\"\n",
            ran.display()
        ),
    )
    .expect("workload");
    let free = || std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let (port_a, port_b) = (free(), free());
    let (url_a, url_b) = (format!("http://127.0.0.1:{port_a}"), format!("http://127.0.0.1:{port_b}"));
    let both = format!("{url_a},{url_b}");
    let controller = |name: &str, port: u16, standby: bool| {
        let (data, fleet) = (path(&dir.join(name)), path(&fleet));
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--fleet", &fleet, "--data", &data, "--listen", &listen, "--store", &store];
        args.extend(["--insecure-http", "--node-lost-after", "600"]);
        if standby {
            args.push("--standby");
            spawn_until(&args, "standby: waiting to lead").0
        } else {
            spawn_until(&args, "gantry controller on").0
        }
    };
    let mut leader = controller("a", port_a, false);
    let mut standby = controller("b", port_b, true);
    let admin = std::fs::read_to_string(dir.join("a").join("admin.token")).expect("admin token").trim().to_string();
    let out =
        gantry(&["token", "create", "rack", "--role", "agent", "--node", "n1", "--server", &url_a, "--token", &admin]);
    std::fs::write(dir.join("n1.token"), stdout(&out).lines().next().expect("secret").trim()).expect("token file");
    let agent_args = [
        "agent",
        "--server",
        &both,
        "--token-file",
        &path(&dir.join("n1.token")),
        "--inventory",
        &path(&fleet),
        "--node",
        "n1",
        "--data",
        &path(&dir.join("agent")),
    ];
    let _agent = spawn(&agent_args).0;
    let out = gantry(&["submit", &path(&workload), "--server", &both, "--token", &admin]);
    assert!(stdout(&out).contains("submitted 12 job(s)"), "{}", stderr(&out));
    let count = |state: &str| -> usize {
        let out = gantry(&["queue", "--state", state, "--json", "--server", &both, "--token", &admin]);
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).map_or(0, |v| v.as_array().map_or(0, Vec::len))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while count("running") < 4 {
        assert!(std::time::Instant::now() < deadline, "nothing ran on the leader");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The standby answers, saying what it is (clients given both URLs move on past it).
    let asked = gantry(&["queue", "--server", &url_b, "--token", &admin]);
    assert!(stderr(&asked).contains("is a standby controller"), "{}", stderr(&asked));
    assert!(stderr(&asked).contains(&format!("the leader answers at {url_a}")), "{}", stderr(&asked));
    // A submission the leader made durable (and answered), sent again with its key after the
    // failover as a client that never heard the answer would: the same jobs, none new.
    let client = gantry_wire::client::Client::new(&both, &Default::default()).expect("client");
    let retry = |what: &str| {
        let body = "[[job]]\nname = \"keyed\"\ncommand = \"true\"\n";
        let (status, text) = client
            .request_with(Some(&admin), "POST", "/v1/jobs", Some(body), &[("Idempotency-Key", "failover-1")])
            .expect(what);
        assert_eq!(status, 201, "{what}: {text}");
        text
    };
    let before = retry("the leader answers");
    leader.0.kill().expect("SIGKILL");
    leader.0.wait().expect("reaped");
    let killed = std::time::Instant::now();
    while gantry(&["queue", "--server", &url_b, "--token", &admin]).status.code() != Some(0) {
        assert!(killed.elapsed() < std::time::Duration::from_secs(10), "the standby did not lead within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    eprintln!("the standby served {:?} after the leader's kill -9", killed.elapsed());
    assert_eq!(retry("the new leader answers"), before, "the retried submission is not doubled");
    // Submitting through both URLs reaches the new leader.
    let extra = write_fixture(&dir, "extra.toml", "[[job]]\nname = \"after\"\ncommand = \"true\"\n");
    let out = gantry(&["submit", &extra, "--server", &both, "--token", &admin]);
    assert!(stdout(&out).contains("submitted 1 job(s): 14"), "{}{}", stdout(&out), stderr(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count("completed") < 14 {
        if std::time::Instant::now() > deadline {
            let others = gantry(&["queue", "--all", "--server", &both, "--token", &admin]);
            panic!("only {} of 14 completed:\n{}", count("completed"), stdout(&others));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The old leader's machine comes back as the standby; the new leader is paused (SIGSTOP)
    // past its lease: the standby cuts it off and leads; woken, the paused one finds its
    // store connection gone and steps down to a standby instead of acting on stale state.
    let _back = controller("a", port_a, true);
    let out = gantry(&["submit", &path(&workload), "--server", &both, "--token", &admin]);
    assert!(stdout(&out).contains("submitted 12 job(s): 15-26"), "{}{}", stdout(&out), stderr(&out));
    while count("running") < 1 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid = standby.0.id().to_string();
    let started_lines = || std::fs::read_to_string(&ran).map_or(0, |t| t.lines().count());
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().expect("kill").success());
    let paused = std::time::Instant::now();
    let started_before = started_lines();
    // A CLI call given both URLs answers (here: an error naming the standby) in about the
    // time a controller has to begin its answer, not after a minute on the frozen one.
    let asked = std::time::Instant::now();
    let _ = gantry(&["queue", "--server", &both, "--token", &admin]);
    let took = asked.elapsed();
    assert!(took < std::time::Duration::from_secs(5), "a CLI call hung on the paused leader for {took:?}");
    while gantry(&["queue", "--server", &url_a, "--token", &admin]).status.code() != Some(0) {
        assert!(paused.elapsed() < std::time::Duration::from_secs(20), "no takeover from the paused leader");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!("the paused leader was replaced after {:?} (lease: 10 s); a CLI call took {took:?}", paused.elapsed());
    // The agent leaves the frozen leader for the new one and tasks start again, the old
    // leader still paused.
    while started_lines() <= started_before {
        assert!(
            paused.elapsed() < std::time::Duration::from_secs(25),
            "no task started while the old leader was paused"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    eprintln!("a task started {:?} after the leader was paused", paused.elapsed());
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().expect("kill").success());
    let woke = std::time::Instant::now();
    // Woken, the deposed leader answers nothing from its stale memory (it says its lease has
    // lapsed, or it is already gone).
    let asked = gantry(&["queue", "--json", "--server", &url_b, "--token", &admin]);
    assert_ne!(asked.status.code(), Some(0), "a deposed leader answered: {}", stdout(&asked));
    // It steps down and rejoins as a standby by itself, on the same address (no supervisor).
    loop {
        assert!(standby.0.try_wait().expect("waits").is_none(), "the deposed leader exited instead of rejoining");
        let asked = gantry(&["queue", "--server", &url_b, "--token", &admin]);
        if stderr(&asked).contains("is a standby controller") {
            break;
        }
        assert!(woke.elapsed() < std::time::Duration::from_secs(15), "the deposed leader did not rejoin as a standby");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count("completed") < 26 {
        if std::time::Instant::now() > deadline {
            let others = gantry(&["queue", "--all", "--server", &both, "--token", &admin]);
            panic!("only {} of 26 completed:\n{}", count("completed"), stdout(&others));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let text = std::fs::read_to_string(&ran).expect("the tasks' own record");
    let mut ids: Vec<u64> = text.lines().map(|l| l.trim().parse().expect("a job id")).collect();
    ids.sort_unstable();
    let expected: Vec<u64> = (1..=12).chain(15..=26).collect();
    assert_eq!(ids, expected, "every job ran exactly once, across both failovers");
}

/// A Kubernetes cluster's nodes and pods (kubectl's JSON, GPU Feature Discovery labels) come
/// in as a fleet and a trace that `gantry sim` replays; a product the catalog does not know is
/// named with the --map that fixes it.
#[test]
fn a_kubernetes_cluster_imports_and_replays() {
    let dir = temp_dir("import-k8s");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../gantry-spec/fixtures/kubernetes");
    let out = gantry(&["import", "kubernetes", "--nodes", &format!("{fixtures}/nodes.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("imported 4 node(s)"), "{}", stderr(&out));
    let fleet = write_fixture(&dir, "fleet.toml", &stdout(&out));
    let out = gantry(&["import", "kubernetes", "--pods", &format!("{fixtures}/pods.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("imported 4 job(s)") && stderr(&out).contains("1 × never started (pending)"),
        "{}",
        stderr(&out)
    );
    let trace = write_fixture(&dir, "trace.jsonl", &stdout(&out));
    let out = gantry(&["sim", "--fleet", &fleet, "--trace", &trace, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(runs[0]["started"], 4, "{runs}");
    let nodes = std::fs::read_to_string(format!("{fixtures}/nodes.json")).expect("fixture");
    let odd = write_fixture(&dir, "odd.json", &nodes.replace("Tesla-T4-SHARED", "NVIDIA-Custom-X"));
    let out = gantry(&["import", "kubernetes", "--nodes", &odd]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--map NVIDIA-Custom-X=MODEL"), "{}", stderr(&out));
    let out = gantry(&["import", "kubernetes", "--nodes", &odd, "--map", "NVIDIA-Custom-X=T4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Kueue's queues as a queue file the replay takes; its quotas hold the imported jobs.
    let out = gantry(&["import", "kueue", &format!("{fixtures}/kueue.yaml")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("not mapped: ClusterQueue prod: lendingLimit 2"), "{}", stderr(&out));
    let queues = write_fixture(&dir, "queues.toml", &stdout(&out));
    let out = gantry(&["sim", "--fleet", &fleet, "--trace", &trace, "--order", "fair-share", "--queues", &queues]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("waiting, by why (share of job-time): quota"), "{}", stdout(&out));
    let out = gantry(&["import", "kueue", &odd]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A Slurm cluster (slurm.conf) and its history (sacct) come in as a fleet, queues and a trace
/// that `gantry sim` replays; an ambiguous GPU type is named with the --map that settles it.
#[test]
fn a_slurm_cluster_and_its_sacct_history_import_and_replay() {
    let dir = temp_dir("import-slurm");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../gantry-spec/fixtures/slurm");
    let conf = format!("{fixtures}/slurm.conf");
    let out = gantry(&["import", "slurm", "--conf", &conf]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--map a100=A100-"), "{}", stderr(&out));
    let queues = dir.join("queues.toml");
    let q = queues.to_str().expect("utf-8");
    let out = gantry(&["import", "slurm", "--conf", &conf, "--map", "a100=A100-SXM4-80GB", "--queues-out", q]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fleet = write_fixture(&dir, "fleet.toml", &stdout(&out));
    let out = gantry(&["import", "sacct", &format!("{fixtures}/sacct.txt"), "--map", "a100=A100-SXM4-80GB"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("imported 6 job(s)") && stderr(&out).contains("1 × cancelled while pending"),
        "{}",
        stderr(&out)
    );
    let trace = write_fixture(&dir, "trace.jsonl", &stdout(&out));
    let out = gantry(&["sim", "--fleet", &fleet, "--trace", &trace, "--order", "fair-share", "--queues", q, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(runs[0]["started"], 6, "{runs}");
    // Or straight from sacct's output.
    let sacct = format!("{fixtures}/sacct.txt");
    let out = gantry(&["sim", "--sacct", &sacct, "--fleet", &fleet, "--map", "a100=A100-SXM4-80GB", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runs: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!((runs[0]["started"].as_u64(), runs[0]["trace"].as_str()), (Some(6), Some("sacct")), "{runs}");
    assert!(stderr(&out).contains("1 × cancelled while pending"), "{}", stderr(&out));
}
