//! The controller with real processes on loopback: submit → running → completed (the task
//! prints the devices it got, checked against the placement), bad requests change nothing,
//! cancel and time limits end the whole process group, and a restart loses or runs nothing
//! twice.

use gantry_server::{ServeConfig, start};
use gantry_types::JobState;
use gantry_wire::client::request;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod confinement;
mod disk_full;
mod isolation;
mod partitions;
mod tenants;
mod trust;

const FLEET: &str =
    "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";

/// The tests' controller settings: loopback, plain HTTP, a fast tick, local agents.
fn config_for(data: PathBuf, fleet: gantry_types::Fleet, tweak: impl FnOnce(&mut ServeConfig)) -> ServeConfig {
    let mut config = ServeConfig {
        reconfigure: Default::default(),
        confinement: Default::default(),
        log: Default::default(),
        advertise: None,
        data_dir: data,
        listen: "127.0.0.1:0".parse().expect("addr"),
        fleet,
        tick: Duration::from_millis(100),
        scheduling: Default::default(),
        simulate_tasks: None,
        agents: gantry_server::control::Agents::Local,
        measure_local_gpus: false,
        billing: Default::default(),
        idle: Default::default(),
        admission: Default::default(),
        group_commit: true,
        tls: None,
        insecure_http: false,
        store: Default::default(),
        accounts: gantry_server::users::Accounts::for_this_process(Default::default()).expect("accounts"),
    };
    tweak(&mut config);
    config
}

struct Server {
    rt: tokio::runtime::Runtime,
    running: Option<gantry_server::Running>,
    url: String,
    data: PathBuf,
    /// The admin secret the first start wrote.
    token: String,
}

impl Server {
    fn start_in(data: PathBuf) -> Server {
        Server::start_with(data, gantry_engine::sched::SchedulerConfig::default())
    }

    fn start_with(data: PathBuf, scheduling: gantry_engine::sched::SchedulerConfig) -> Server {
        Server::start_full(data, scheduling, FLEET)
    }

    fn start_full(data: PathBuf, scheduling: gantry_engine::sched::SchedulerConfig, fleet: &str) -> Server {
        Server::start_agents(data, scheduling, fleet, gantry_server::control::Agents::Local)
    }

    /// A controller whose nodes are served by remote agents.
    fn remote(name: &str) -> Server {
        let data = std::env::temp_dir().join(format!("gantry-server-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let agents = gantry_server::control::Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
        Server::start_agents(data, gantry_engine::sched::SchedulerConfig::default(), FLEET, agents)
    }

    fn start_agents(
        data: PathBuf,
        scheduling: gantry_engine::sched::SchedulerConfig,
        fleet: &str,
        agents: gantry_server::control::Agents,
    ) -> Server {
        Server::start_config(data, scheduling, fleet, agents, |_| {})
    }

    /// A local controller with an idle policy.
    fn with_idle(name: &str, idle: gantry_server::idle::IdlePolicy) -> Server {
        let data = std::env::temp_dir().join(format!("gantry-server-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let local = gantry_server::control::Agents::Local;
        Server::start_config(data, Default::default(), FLEET, local, move |c| c.idle = idle)
    }

    fn start_config(
        data: PathBuf,
        scheduling: gantry_engine::sched::SchedulerConfig,
        fleet: &str,
        agents: gantry_server::control::Agents,
        tweak: impl FnOnce(&mut ServeConfig),
    ) -> Server {
        let fleet = gantry_spec::parse_fleet(fleet, gantry_catalog::Catalog::embedded()).expect("fleet");
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let mut config = config_for(data.clone(), fleet, |_| {});
        config.scheduling = scheduling;
        config.agents = agents;
        tweak(&mut config);
        let running = rt.block_on(start(config)).expect("starts");
        let url = format!("http://{}", running.addr);
        let token = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
        Server { rt, running: Some(running), url, data, token }
    }

    fn new(name: &str) -> Server {
        let data = std::env::temp_dir().join(format!("gantry-server-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        Server::start_in(data)
    }

    fn stop(mut self) -> PathBuf {
        let running = self.running.take().expect("running");
        self.rt.block_on(running.shutdown());
        self.data.clone()
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call_as(Some(&self.token.clone()), method, path, body)
    }

    fn call_as(&self, token: Option<&str>, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = request(&self.url, token, method, path, body).expect("reaches the server");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A new agent token's secret.
    fn agent_token(&self) -> String {
        let (status, agent) =
            self.call("POST", "/v1/tokens", Some(r#"{"name": "rack1", "role": "agent", "node": "n1"}"#));
        assert_eq!(status, 201, "{agent}");
        agent["secret"].as_str().expect("secret").to_string()
    }

    fn submit(&self, workload: &str) -> Vec<u64> {
        let (status, body) = self.call("POST", "/v1/jobs", Some(workload));
        assert_eq!(status, 201, "{body}");
        body["ids"].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id")).collect()
    }

    fn state(&self, id: u64) -> (JobState, Value) {
        let (status, body) = self.call("GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "{body}");
        (serde_json::from_value(body["state"].clone()).expect("state"), body)
    }

    /// Poll until job `id` is in `want` (real processes take real time; 20 s at most).
    fn wait_for(&self, id: u64, want: JobState) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (state, body) = self.state(id);
            if state == want {
                return body;
            }
            assert!(Instant::now() < deadline, "job {id} still {state:?}, wanted {want:?}: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_job_runs_as_a_process_that_sees_its_devices() {
    let server = Server::new("runs");
    let ids = server.submit(
        "[[job]]\nname = \"probe\"\ngpu = { count = 1 }\ncommand = \"echo devices=$CUDA_VISIBLE_DEVICES rank=$GANTRY_RANK/$GANTRY_WORLD_SIZE\"\n",
    );
    let done = server.wait_for(ids[0], JobState::Completed);
    let devices = done["tasks"][0]["devices"].as_array().expect("devices").clone();
    assert_eq!(devices.len(), 1);
    let uuid = devices[0].as_str().expect("uuid");
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    let (status, logs) =
        request(&server.url, Some(&server.token), "GET", &format!("/v1/jobs/{}/logs", ids[0]), None).expect("logs");
    assert_eq!(status, 200);
    assert!(logs.contains(&format!("devices={uuid} rank=0/1")), "{logs}");
    assert_eq!(done["exit_code"], 0, "a completed job exited 0: {done}");
    // A failing command fails the job with its exit code.
    let bad = server.submit("[[job]]\nname = \"bad\"\ncommand = \"exit 7\"\n");
    let failed = server.wait_for(bad[0], JobState::Failed);
    assert_eq!(failed["exit_code"], 7);
    server.stop();
}

#[test]
fn bad_requests_are_4xx_with_a_reason_and_change_nothing() {
    let server = Server::new("bad");
    let cases: Vec<(&str, &str, Option<String>, u16, &str)> = vec![
        ("POST", "/v1/jobs", Some("[[job]]\nname = 3\n".into()), 400, "not a valid workload file"),
        ("POST", "/v1/jobs", Some("[[job]]\nname = \"a\"\ncolour = \"red\"\n".into()), 400, "unknown field `colour`"),
        ("POST", "/v1/jobs", Some(String::new()), 400, "the workload has no jobs"),
        (
            "POST",
            "/v1/jobs",
            Some("[[job]]\nname = \"huge\"\ngpu = { count = 8 }\n".into()),
            400,
            "can never run on this fleet",
        ),
        (
            "POST",
            "/v1/jobs",
            Some("[[job]]\nname = \"ok\"\n[[job]]\nname = \"ok\"\n".into()),
            400,
            "job name used twice",
        ),
        ("GET", "/v1/jobs/abc", None, 400, "\"abc\" is not a job id"),
        ("GET", "/v1/jobs/99", None, 404, "no job 99"),
        ("DELETE", "/v1/jobs/99", None, 404, "no job 99"),
        ("GET", "/v1/jobs?state=sleeping", None, 400, "unknown state \"sleeping\""),
    ];
    for (method, path, body, status, expected) in cases {
        let (got, reply) = server.call(method, path, body.as_deref());
        assert_eq!(got, status, "{method} {path}: {reply}");
        let text = reply["error"].as_str().map_or_else(|| reply.to_string(), str::to_string);
        assert!(text.contains(expected), "{method} {path}: {reply}");
    }
    // Each refusal names the field it is about, and a workload's says what to do.
    let fields = [
        ("GET", "/v1/jobs/abc", None, "id"),
        ("GET", "/v1/jobs?state=sleeping", None, "state"),
        ("POST", "/v1/jobs", Some("[[job]]\nname = \"huge\"\ngpu = { count = 8 }\n"), "job"),
        ("POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\ngpu = { count = \"two\" }\n"), "job \"x\""),
    ];
    for (method, path, body, field) in fields {
        let (_, reply) = server.call(method, path, body);
        assert_eq!(reply["field"].as_str(), Some(field), "{method} {path}: {reply}");
    }
    let (_, reply) = server.call("POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\ngpu = { count = \"two\" }\n"));
    assert!(reply["hint"].as_str().is_some_and(|h| h.contains("docs/formats.md")), "{reply}");
    // A body over the limit: a 413 saying so, or — when the server stops reading before the
    // client has sent it all and the answer is lost — the client's error saying why.
    let big = format!("# {}\n", "x".repeat(2 << 20));
    match request(&server.url, Some(&server.token), "POST", "/v1/jobs", Some(&big)) {
        Ok((status, text)) => {
            assert_eq!(status, 413, "{text}");
            assert!(text.contains("the request body is too large"), "{text}");
        }
        Err(e) => assert!(e.to_string().contains("over the controller's limit"), "{e}"),
    }
    let (_, all) = server.call("GET", "/v1/jobs", None);
    assert_eq!(all, Value::Array(Vec::new()), "nothing was stored");
    server.stop();
}

#[test]
fn cancel_and_time_limits_end_the_whole_process_group() {
    let server = Server::new("stop");
    // Each task starts a child that would outlive it if only the task's own pid were killed.
    let marker = server.data.join("survivor");
    let workload = format!(
        "[[job]]\nname = \"long\"\ngpu = {{ count = 1 }}\ngrace = 1\ncommand = \"(sleep 3; touch {m}) & sleep 60\"\n\
         [[job]]\nname = \"limited\"\ngpu = {{ count = 1 }}\ntime_limit = 1\ngrace = 1\ncommand = \"(sleep 3; touch {m}) & sleep 60\"\n",
        m = marker.display()
    );
    let ids = server.submit(&workload);
    server.wait_for(ids[0], JobState::Running);
    let (status, reply) = server.call("DELETE", &format!("/v1/jobs/{}", ids[0]), None);
    assert_eq!((status, reply["status"].as_str()), (200, Some("stopping")), "{reply}");
    server.wait_for(ids[0], JobState::Cancelled);
    server.wait_for(ids[1], JobState::Failed);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!marker.exists(), "a child of a stopped task survived");
    // A waiting job is cancelled at once; a finished one cannot be.
    let waiting = server.submit("[[job]]\nname = \"held\"\nhold = true\n");
    let (status, reply) = server.call("DELETE", &format!("/v1/jobs/{}", waiting[0]), None);
    assert_eq!((status, reply["status"].as_str()), (200, Some("cancelled")), "{reply}");
    let (status, reply) = server.call("DELETE", &format!("/v1/jobs/{}", waiting[0]), None);
    assert_eq!(status, 409, "{reply}");
    server.stop();
}

#[test]
fn a_restart_readopts_running_tasks_and_runs_every_job_once() {
    let server = Server::new("restart");
    let dir = server.data.display().to_string();
    let ids = server.submit(&format!(
        "[[job]]\nname = \"busy\"\ngpu = {{ count = 2 }}\ncommand = \"sleep 2; echo ran >> busy.count\"\nworkdir = \"{dir}\"\n\
         [[job]]\nname = \"next\"\ngpu = {{ count = 2 }}\ncommand = \"echo ran >> next.count\"\nworkdir = \"{dir}\"\n"
    ));
    server.wait_for(ids[0], JobState::Running);
    let (state, why) = server.state(ids[1]);
    assert_eq!(state, JobState::Pending);
    assert!(why["pending"]["reason"]["reason"] == "resources", "{why}");
    // The controller stops while busy runs; its task keeps running and is taken back.
    let data = server.stop();
    let server = Server::start_in(data);
    assert_eq!(server.state(ids[0]).0, JobState::Running, "re-adopted, not started again");
    assert_eq!(server.state(ids[1]).0, JobState::Pending, "its GPUs are still taken");
    server.wait_for(ids[0], JobState::Completed);
    server.wait_for(ids[1], JobState::Completed);
    for name in ["busy", "next"] {
        let runs = std::fs::read_to_string(server.data.join(format!("{name}.count"))).expect("the task's own record");
        assert_eq!(runs, "ran\n", "{name} ran exactly once, by its own side effect");
    }
    // A task that dies while the controller is down, leaving no exit behind, is lost.
    let victim = server.submit("[[job]]\nname = \"victim\"\ncommand = \"sleep 60\"\n");
    server.wait_for(victim[0], JobState::Running);
    // Running is shown once the start is decided; the launch follows its commit.
    let pid_file = server.data.join("nodes/n1/jobs").join(victim[0].to_string()).join("0/0.pid");
    for _ in 0..200 {
        if pid_file.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let data = server.stop();
    let pgid = std::fs::read_to_string(&pid_file).expect("pid file").trim().to_string();
    let killed = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status().expect("kill");
    assert!(killed.success());
    let server = Server::start_in(data);
    server.wait_for(victim[0], JobState::Lost);
    server.stop();
}

#[test]
fn tokens_and_roles_decide_who_sees_and_does_what() {
    let server = Server::new("auth");
    // No token, a malformed one, an unknown one: 401, nothing stored.
    for (token, expected) in [(None, "missing token"), (Some("nonsense"), "unknown or revoked token")] {
        let (status, reply) = server.call_as(token, "POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\n"));
        assert_eq!(status, 401, "{reply}");
        assert!(reply["error"].as_str().expect("error").contains(expected), "{reply}");
    }
    let token = |name: &str, body: &str| -> String {
        let (status, reply) = server.call("POST", "/v1/tokens", Some(body));
        assert_eq!(status, 201, "{name}: {reply}");
        assert_eq!(reply["name"], name);
        reply["secret"].as_str().expect("secret").to_string()
    };
    let alice = token("alice", r#"{"name": "alice", "role": "member", "queues": ["research"]}"#);
    let reader = token("reader", r#"{"name": "reader", "role": "read-only"}"#);
    let (status, reply) = server.call("POST", "/v1/tokens", Some(r#"{"name": "alice", "role": "admin"}"#));
    assert_eq!(status, 409, "{reply}");
    for (body, expected) in [
        (r#"{"name": "bob", "role": "member"}"#, "a member token needs at least one queue"),
        (r#"{"name": "bob", "role": "root"}"#, "unknown variant `root`"),
        (r#"{"name": "b o b", "role": "admin"}"#, "is not a token name"),
        (r#"{"name": "bob", "role": "admin", "colour": 1}"#, "unknown field `colour`"),
        ("not json", "token request"),
    ] {
        let (status, reply) = server.call("POST", "/v1/tokens", Some(body));
        assert_eq!(status, 400, "{body}: {reply}");
        assert!(reply["error"].as_str().expect("error").contains(expected), "{body}: {reply}");
    }
    // A member submits to its queues only, and sees only their jobs.
    let research = "[[job]]\nname = \"r\"\nqueue = \"research\"\nhold = true\n";
    let prod = "[[job]]\nname = \"p\"\nqueue = \"prod\"\nhold = true\n";
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(prod));
    assert_eq!(status, 403, "{reply}");
    assert_eq!(reply["error"], "token \"alice\" is a member of research, not of queue \"prod\"");
    let (status, mine) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(research));
    assert_eq!(status, 201, "{mine}");
    let theirs = server.submit(prod);
    let (_, seen) = server.call_as(Some(&alice), "GET", "/v1/jobs", None);
    assert_eq!(seen.as_array().expect("list").len(), 1, "alice sees only research: {seen}");
    let (status, _) = server.call_as(Some(&alice), "GET", &format!("/v1/jobs/{}", theirs[0]), None);
    assert_eq!(status, 403);
    let (status, _) = server.call_as(Some(&alice), "DELETE", &format!("/v1/jobs/{}", theirs[0]), None);
    assert_eq!(status, 403);
    // Read-only sees everything and changes nothing; only admins manage tokens.
    let (_, all) = server.call_as(Some(&reader), "GET", "/v1/jobs", None);
    assert_eq!(all.as_array().expect("list").len(), 2);
    let (status, reply) = server.call_as(Some(&reader), "POST", "/v1/jobs", Some(research));
    assert_eq!((status, reply["error"].as_str()), (403, Some("token \"reader\" is read-only")));
    let (status, _) = server.call_as(Some(&alice), "GET", "/v1/tokens", None);
    assert_eq!(status, 403);
    let (_, listed) = server.call("GET", "/v1/tokens", None);
    let names: Vec<&str> = listed.as_array().expect("list").iter().map(|t| t["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["admin", "alice", "reader"]);
    assert!(listed.as_array().expect("list").iter().all(|t| t["hash"] == ""), "hashes stay in the store");
    // Revoked, a token stops working at once.
    let (status, _) = server.call("DELETE", "/v1/tokens/alice", None);
    assert_eq!(status, 204);
    let (status, _) = server.call_as(Some(&alice), "GET", "/v1/jobs", None);
    assert_eq!(status, 401);
    let (_, count) = server.call("GET", "/v1/jobs", None);
    assert_eq!(count.as_array().expect("list").len(), 2, "refused requests stored nothing");
    server.stop();
}

#[test]
fn a_higher_priority_job_preempts_the_victim_waits_again_and_finishes_later() {
    use gantry_engine::sched::{Order, SchedulerConfig};
    let data = std::env::temp_dir().join(format!("gantry-server-{}-preempt", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let tree = gantry_types::QueueTree::flat(["low", "high"], 3600, 86_400);
    let config = SchedulerConfig { order: Order::FairShare(tree), preempt: true, ..SchedulerConfig::default() };
    let server = Server::start_with(data, config);
    let dir = server.data.display().to_string();
    let (status, reply) = server.call("POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\nqueue = \"nope\"\n"));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("unknown queue \"nope\""), "{reply}");
    assert_eq!(server.call("GET", "/v1/jobs", None).1, Value::Array(Vec::new()), "nothing stored");
    // The low job holds both GPUs; each run appends a line, and the second one ends at once.
    let low = server.submit(&format!(
        "[[job]]\nname = \"low\"\nqueue = \"low\"\ngpu = {{ count = 2 }}\ngrace = 1\nworkdir = \"{dir}\"\n\
         command = \"echo run >> low.runs; [ $(wc -l < low.runs) -ge 2 ] && exit 0; sleep 60\"\n"
    ));
    server.wait_for(low[0], JobState::Running);
    let runs = server.data.join("low.runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !runs.exists() {
        assert!(Instant::now() < deadline, "the low job's task never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let high = server.submit(
        "[[job]]\nname = \"urgent\"\nqueue = \"high\"\npriority = 10\ngpu = { count = 1 }\ncommand = \"true\"\n",
    );
    server.wait_for(high[0], JobState::Completed);
    let done = server.wait_for(low[0], JobState::Completed);
    assert_eq!(done["requeues"], 1, "stopped once for the urgent job: {done}");
    assert_eq!(std::fs::read_to_string(&runs).expect("runs"), "run\nrun\n", "signalled, then run again once");
    server.stop();
}

#[test]
fn a_gang_starts_all_or_nothing_and_dependencies_order_jobs() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-gang", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let two_nodes = FLEET.replace("name = \"n1\"", "name = \"n\"\ncount = 2");
    let server = Server::start_full(data, Default::default(), &two_nodes);
    let dir = server.data.display().to_string();
    // One GPU busy: a 4-task gang (one GPU each) cannot start on the 3 left, and none of it runs.
    let blocker = server.submit("[[job]]\nname = \"blocker\"\ngpu = { count = 1 }\ncommand = \"sleep 1\"\n");
    server.wait_for(blocker[0], JobState::Running);
    let gang = server.submit(&format!(
        "[[job]]\nname = \"gang\"\nworkdir = \"{dir}\"\ncommand = \"echo $GANTRY_RANK/$GANTRY_WORLD_SIZE $CUDA_VISIBLE_DEVICES >> gang.log\"\n\
         [[job.task]]\nname = \"worker\"\nreplicas = 4\ngpu = {{ count = 1 }}\n"
    ));
    let (state, waiting) = server.state(gang[0]);
    assert_eq!(state, JobState::Pending, "{waiting}");
    assert!(!server.data.join("gang.log").exists(), "no task of the gang ran alone");
    let done = server.wait_for(gang[0], JobState::Completed);
    let mut lines: Vec<String> =
        std::fs::read_to_string(server.data.join("gang.log")).expect("log").lines().map(str::to_string).collect();
    lines.sort();
    let ranks: Vec<&str> = lines.iter().map(|l| l.split_whitespace().next().expect("rank")).collect();
    assert_eq!(ranks, ["0/4", "1/4", "2/4", "3/4"]);
    let devices: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l.split_whitespace().nth(1).expect("device")).collect();
    assert_eq!(devices.len(), 4, "four different GPUs: {lines:?}");
    assert_eq!(done["tasks"].as_array().expect("tasks").len(), 4);
    // Dependencies: within a file, and on a job submitted earlier, by name.
    let ids = server.submit(&format!(
        "[[job]]\nname = \"prep\"\nworkdir = \"{dir}\"\ncommand = \"echo prep >> order.log\"\n\
         [[job]]\nname = \"train\"\nafter = [\"afterok:prep\"]\nworkdir = \"{dir}\"\ncommand = \"echo train >> order.log\"\n\
         [[job]]\nname = \"cleanup\"\nafter = [\"afternotok:prep\"]\ncommand = \"true\"\n"
    ));
    server.wait_for(ids[1], JobState::Completed);
    server.wait_for(ids[2], JobState::Cancelled);
    let report = server.submit(&format!(
        "[[job]]\nname = \"report\"\nafter = [\"train\"]\nworkdir = \"{dir}\"\ncommand = \"echo report >> order.log\"\n"
    ));
    server.wait_for(report[0], JobState::Completed);
    assert_eq!(std::fs::read_to_string(server.data.join("order.log")).expect("log"), "prep\ntrain\nreport\n");
    let (status, reply) = server.call("POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\nafter = [\"ghost\"]\n"));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("unknown job \"ghost\""), "{reply}");
    server.stop();
}

#[test]
fn nodes_show_their_gpus_and_a_drain_holds_new_work_across_restarts() {
    let server = Server::new("drain");
    let busy = server.submit("[[job]]\nname = \"busy\"\ngpu = { count = 1 }\ncommand = \"sleep 2\"\n");
    server.wait_for(busy[0], JobState::Running);
    // Utilization arrives with the agent's next heartbeat after the launch.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, nodes) = loop {
        let (status, nodes) = server.call("GET", "/v1/nodes", None);
        let sampled = nodes[0]["gpus"].as_array().is_some_and(|gpus| {
            gpus.iter()
                .any(|g| g["jobs"] == serde_json::json!([busy[0]]) && g["utilization_pct"].as_u64().unwrap_or(0) > 0)
        });
        if sampled || Instant::now() > deadline {
            break (status, nodes);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes[0]["name"], "n1");
    assert_eq!(nodes[0]["drained"], false);
    let gpus = nodes[0]["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 2);
    let holding: Vec<&Value> = gpus.iter().filter(|g| g["jobs"] == serde_json::json!([busy[0]])).collect();
    assert_eq!(holding.len(), 1, "one GPU holds the busy job: {nodes}");
    assert_eq!((holding[0]["allocated_milli"].as_u64(), holding[0]["mode"].as_str()), (Some(1000), Some("whole")));
    // Simulated utilization (no NVML here): a busy GPU below its allocation, an idle one 0.
    let busy_pct = holding[0]["utilization_pct"].as_u64().expect("a sample");
    assert!((55..95).contains(&busy_pct) && holding[0]["measured"] == false, "{nodes}");
    assert!(gpus.iter().any(|g| g["jobs"] == serde_json::json!([]) && g["utilization_pct"] == 0), "{nodes}");
    let (status, reply) = server.call("POST", "/v1/nodes/n1/drain", None);
    assert_eq!((status, reply["changed"].as_bool()), (200, Some(true)), "{reply}");
    let (status, _) = server.call("POST", "/v1/nodes/ghost/drain", None);
    assert_eq!(status, 404);
    let waiting = server.submit("[[job]]\nname = \"later\"\ngpu = { count = 1 }\ncommand = \"true\"\n");
    server.wait_for(busy[0], JobState::Completed);
    let (state, why) = server.state(waiting[0]);
    assert_eq!(state, JobState::Pending, "a drained node takes nothing new: {why}");
    assert!(why["pending"].to_string().contains("gantry.io/drained"), "{why}");
    // A restart remembers the drain; resume lets the job run.
    let data = server.stop();
    let server = Server::start_in(data);
    assert_eq!(server.call("GET", "/v1/nodes", None).1[0]["drained"], true);
    assert_eq!(server.state(waiting[0]).0, JobState::Pending);
    let (status, _) = server.call("POST", "/v1/nodes/n1/resume", None);
    assert_eq!(status, 200);
    server.wait_for(waiting[0], JobState::Completed);
    server.stop();
}

/// The agent protocol by hand: registration is checked against the fleet, a heartbeat gets
/// the launch until the agent reports the task, an exit reported twice counts once, and a
/// task the controller does not run is ordered to stop.
#[test]
fn agents_register_against_the_fleet_and_reports_count_once() {
    let server = Server::remote("agent-protocol");
    let agent = server.agent_token();
    let (_, member) =
        server.call("POST", "/v1/tokens", Some(r#"{"name": "m", "role": "member", "queues": ["default"]}"#));
    let member = member["secret"].as_str().expect("secret").to_string();
    // GPU 0 says it is not in MIG mode (as the fleet has it); GPU 1 does not say (not checked).
    let good = r#"{"node": "n1", "gpus": [{"index": 0, "uuid": "GPU-real-0", "model": "A100-SXM4-80GB", "mig_mode": false}, {"index": 1, "uuid": "GPU-real-1", "model": "A100-SXM4-80GB"}]}"#;
    let newer = format!(
        "the agent speaks protocol {}, this controller {}",
        gantry_wire::PROTOCOL_VERSION + 1,
        gantry_wire::PROTOCOL_VERSION
    );
    let cases: Vec<(Option<&str>, &str, String, u16, &str)> = vec![
        (Some(&member), "/v1/agents/register", good.into(), 403, "for agent tokens"),
        (None, "/v1/agents/register", good.into(), 401, "missing token"),
        (Some(&agent), "/v1/agents/register", "{".into(), 400, "agent registration"),
        (
            Some(&agent),
            "/v1/agents/register",
            good.replace("\"node\"", "\"colour\": 1, \"node\""),
            400,
            "unknown field `colour`",
        ),
        (
            Some(&agent),
            "/v1/agents/register",
            good.replace("n1", "n9"),
            403,
            "is node \"n1\"'s agent token; it cannot act for node \"n9\"",
        ),
        (
            Some(&server.token),
            "/v1/agents/register",
            good.replace("n1", "n9"),
            404,
            "not in the controller's fleet (it has: n1)",
        ),
        (
            Some(&agent),
            "/v1/agents/register",
            good.replace("A100-SXM4-80GB\"}]", "H100-SXM5-80GB\"}]"),
            400,
            "the agent found GPUs [0:A100-SXM4-80GB, 1:H100-SXM5-80GB] but the fleet file says [0:A100-SXM4-80GB, 1:A100-SXM4-80GB]",
        ),
        (Some(&agent), "/v1/agents/register", good.replace("GPU-real-1", ""), 400, "GPU 1 has no usable UUID"),
        (
            Some(&agent),
            "/v1/agents/register",
            good.replace("\"node\"", &format!("\"protocol\": {}, \"node\"", gantry_wire::PROTOCOL_VERSION + 1)),
            400,
            &newer,
        ),
        (
            Some(&agent),
            "/v1/agents/register",
            good.replace("\"mig_mode\": false", r#""mig_mode": true, "mig": [{"profile": "3g.40gb", "start": 2}]"#),
            400,
            "GPU 0: the agent reports mig 3g.40gb@2 that the catalog does not allow",
        ),
        (Some(&agent), "/v1/agents/n1/heartbeat", r#"{"tasks": []}"#.into(), 409, "register first"),
        (Some(&agent), "/v1/jobs", "[[job]]\nname = \"x\"\n".into(), 403, "an agent's"),
    ];
    for (token, path, body, want, message) in &cases {
        let (status, reply) = server.call_as(*token, "POST", path, Some(body));
        assert_eq!(status, *want, "{path} {body}: {reply}");
        assert!(reply["error"].as_str().expect("error").contains(message), "{path} {body}: {reply}");
    }
    // Nothing registered: the job waits, and says why.
    let ids = server.submit("[[job]]\nname = \"probe\"\ngpu = { count = 1 }\n");
    std::thread::sleep(Duration::from_millis(300));
    let (state, body) = server.state(ids[0]);
    assert_eq!(state, JobState::Pending, "{body}");
    assert!(body["pending"].to_string().contains("gantry.io/not-ready"), "{body}");
    let (status, reply) = server.call_as(Some(&agent), "POST", "/v1/agents/register", Some(good));
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        (&reply["heartbeat_timeout_s"], &reply["protocol"]),
        (&Value::from(30), &Value::from(gantry_wire::PROTOCOL_VERSION))
    );
    // The launch comes with the heartbeat (held until the cycle places it), again until the
    // agent reports the task; it carries the agent's own UUIDs.
    let beat = |body: &str| -> Value {
        let (status, reply) = server.call_as(Some(&agent), "POST", "/v1/agents/n1/heartbeat", Some(body));
        assert_eq!(status, 200, "{body}: {reply}");
        reply
    };
    let orders = beat(r#"{"tasks": [], "wait_ms": 5000}"#);
    assert_eq!(orders["launch"].as_array().expect("launches").len(), 1, "{orders}");
    assert_eq!(orders["launch"][0]["devices"][0].as_str().expect("uuid").len(), "GPU-real-0".len(), "{orders}");
    assert_eq!(beat(r#"{"tasks": []}"#)["launch"], orders["launch"], "repeated until reported");
    let task = format!(r#""job": {}, "group": "main", "replica": 0, "attempt": 0"#, ids[0]);
    let running = beat(&format!(
        r#"{{"tasks": [{{{task}, "state": "running"}}], "samples": [{{"index": 0, "utilization_pct": 71, "memory_used_mib": 900, "measured": true, "jobs": [{{"job": {}, "utilization_pct": 20}}]}}]}}"#,
        ids[0]
    ));
    assert_eq!(running["launch"], serde_json::json!([]), "{running}");
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    assert_eq!(nodes[0]["gpus"][0]["utilization_pct"], 71, "{nodes}");
    assert_eq!(nodes[0]["ready"], true);
    // The job's own processes (NVML per-process) count for its use, not the whole GPU's 71 %.
    let (_, metrics) = request(&server.url, Some(&server.token), "GET", "/metrics", None).expect("scrape");
    assert!(metrics.contains("gantry_queue_used_gpus{queue=\"default\"} 0.2\n"), "{metrics}");
    // The agent no longer has the task (it stopped between claim and start): offered again.
    let again = beat(r#"{"tasks": []}"#);
    assert_eq!(again["launch"], orders["launch"], "re-offered: {again}");
    beat(&format!(r#"{{"tasks": [{{{task}, "state": "running"}}]}}"#));
    // A task of a job this controller does not run: stop it.
    let stray = beat(r#"{"tasks": [{"job": 999, "group": "task", "replica": 0, "attempt": 0, "state": "running"}]}"#);
    assert_eq!(stray["stop"][0]["job"], 999, "{stray}");
    // The exit, reported twice: forgotten both times, counted once.
    for _ in 0..2 {
        let done = beat(&format!(r#"{{"tasks": [{{{task}, "state": "exited", "code": 0, "timed_out": false}}]}}"#));
        assert_eq!(done["forget"][0]["job"], ids[0], "{done}");
    }
    let (state, body) = server.state(ids[0]);
    assert_eq!(state, JobState::Completed, "{body}");
    // Malformed heartbeats change nothing.
    for body in ["[]", r#"{"tasks": [{"job": "x"}]}"#, r#"{"tasks": [], "extra": 1}"#] {
        let (status, reply) = server.call_as(Some(&agent), "POST", "/v1/agents/n1/heartbeat", Some(body));
        assert_eq!(status, 400, "{body}: {reply}");
    }
    server.stop();
}

#[test]
fn a_local_controller_refuses_remote_agents() {
    let server = Server::new("local-no-agents");
    let body = r#"{"node": "n1", "gpus": []}"#;
    let (status, reply) = server.call("POST", "/v1/agents/register", Some(body));
    assert_eq!(status, 409, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("in-process agents"), "{reply}");
    let (status, reply) = server.call("POST", "/v1/agents/n1/heartbeat", Some(r#"{"tasks": []}"#));
    assert_eq!(status, 409, "a remote heartbeat is refused too: {reply}");
    server.stop();
}

/// The OpenAPI document is generated from the handlers; the committed copy
/// (docs/openapi.json) must match it, and the controller serves it. Regenerate after an API
/// change with `GANTRY_BLESS=1 cargo test -p gantry-server --test server openapi`.
#[test]
fn the_openapi_document_matches_the_committed_copy_and_is_served() {
    let generated = serde_json::to_string_pretty(&gantry_server::api::openapi()).expect("json") + "\n";
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    if std::env::var_os("GANTRY_BLESS").is_some() {
        std::fs::write(&committed, &generated).expect("write docs/openapi.json");
    }
    let on_disk = std::fs::read_to_string(&committed).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/openapi.json is stale: run GANTRY_BLESS=1 cargo test -p gantry-server --test server openapi"
    );
    let doc: Value = serde_json::from_str(&generated).expect("json");
    let paths: Vec<&str> = doc["paths"].as_object().expect("paths").keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "/healthz",
            "/metrics",
            "/v1/agents/register",
            "/v1/agents/{node}/heartbeat",
            "/v1/agents/{node}/logs",
            "/v1/checkpoint",
            "/v1/idle",
            "/v1/jobs",
            "/v1/jobs/estimate",
            "/v1/jobs/{id}",
            "/v1/jobs/{id}/hold",
            "/v1/jobs/{id}/logs",
            "/v1/jobs/{id}/release",
            "/v1/jobs/{id}/requeue",
            "/v1/jobs/{id}/signal",
            "/v1/nodes",
            "/v1/nodes/{name}/drain",
            "/v1/nodes/{name}/lost",
            "/v1/nodes/{name}/resume",
            "/v1/partitions",
            "/v1/plan",
            "/v1/reconfigurations",
            "/v1/series",
            "/v1/tokens",
            "/v1/tokens/{name}",
            "/v1/usage",
        ],
        "every route is documented"
    );
    for schema in ["JobView", "PendingReason", "NodeView", "Heartbeat", "Orders", "ErrorBody"] {
        assert!(doc["components"]["schemas"].get(schema).is_some(), "{schema} missing");
    }
    let server = Server::new("openapi");
    let (status, served) = request(&server.url, None, "GET", "/openapi.json", None).expect("reaches the server");
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&served).expect("json"), doc);
    server.stop();
}

/// The meter: a running job's allocation and (simulated) use reach the ledger, and the
/// usage report bills both; bad queries are 400s.
#[test]
fn usage_is_metered_into_the_ledger_and_reported() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-usage", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    // The admin submits for ada, who has no Unix account here: her tasks run as `nobody`.
    let server = Server::start_config(data, Default::default(), FLEET, gantry_server::control::Agents::Local, |c| {
        c.accounts.map.insert("ada".into(), "nobody".into());
    });
    let ids =
        server.submit("[[job]]\nname = \"metered\"\nuser = \"ada\"\ngpu = { count = 2 }\ncommand = \"sleep 3\"\n");
    server.wait_for(ids[0], JobState::Completed);
    let (status, lines) = server.call("GET", "/v1/usage?by=job", None);
    assert_eq!(status, 200, "{lines}");
    let line = &lines[0];
    assert_eq!(line["key"], ids[0].to_string(), "{lines}");
    // Two GPUs for about three seconds (the clock counts whole seconds).
    let allocated_s = line["allocated_gpu_hours"].as_f64().expect("number") * 3600.0;
    assert!((2.0 * 2.0..=2.0 * 5.0).contains(&allocated_s), "{lines}");
    // Simulated use is 55–94 % of a held GPU, from the agent's samples: the first second or
    // two may still be metered with the sample from before the launch (0 %) — what a real
    // fleet's meter does until the next heartbeat — so less than that is allowed, never more.
    let utilization = line["utilization"].as_f64().expect("number");
    assert!((0.3..0.95).contains(&utilization), "simulated use is not below allocation: {lines}");
    let (_, by_user) = server.call("GET", "/v1/usage?by=user", None);
    assert_eq!(by_user[0]["key"], "ada", "{by_user}");
    for (query, message) in [
        ("/v1/usage?by=colour", "by: user, queue, model or job"),
        ("/v1/usage?from=x", "from/to: Unix seconds"),
        ("/v1/usage?from=100&to=50", "from (100) is after to (50)"),
    ] {
        let (status, reply) = server.call("GET", query, None);
        assert_eq!(status, 400, "{query}: {reply}");
        assert!(reply["error"].as_str().expect("error").contains(message), "{query}: {reply}");
    }
    let (_, member) =
        server.call("POST", "/v1/tokens", Some(r#"{"name": "m", "role": "member", "queues": ["other"]}"#));
    let member = member["secret"].as_str().expect("secret").to_string();
    let (status, seen) = server.call_as(Some(&member), "GET", "/v1/usage", None);
    assert_eq!((status, seen), (200, serde_json::json!([])), "a member sees only its queues' usage");
    server.stop();
}

/// `/metrics`: the documented families, bounded labels; the classic text format by default,
/// OpenMetrics (with its `# EOF`) when asked for.
#[test]
fn metrics_expose_allocation_next_to_utilization() {
    let server = Server::new("metrics");
    // A waiting job cancelled counts as ended, too.
    let held = server.submit("[[job]]\nname = \"parked\"\nhold = true\n");
    assert_eq!(server.call("DELETE", &format!("/v1/jobs/{}", held[0]), None).0, 200);
    let ids = server.submit("[[job]]\nname = \"busy\"\ngpu = { count = 1 }\ncommand = \"sleep 2\"\n");
    server.wait_for(ids[0], JobState::Running);
    // Utilization arrives with the agent's next heartbeat after the launch.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, text) = loop {
        let (status, text) = request(&server.url, Some(&server.token), "GET", "/metrics", None).expect("scrape");
        let busy = "model_name=\"NVIDIA A100-SXM4-80GB\",simulated=\"true\"} 0.";
        if text.contains(busy) || Instant::now() > deadline {
            break (status, text);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200, "{text}");
    for line in [
        "gantry_gpu_allocated_ratio{node=\"n1\",gpu=\"0\",UUID=\"GPU-",
        ",model=\"A100-SXM4-80GB\",model_name=\"NVIDIA A100-SXM4-80GB\"} 1",
        "gantry_fleet_gpus{model=\"A100-SXM4-80GB\"} 2",
        "gantry_fleet_allocated_gpus{model=\"A100-SXM4-80GB\"} 1",
        "gantry_queue_allocated_gpus{queue=\"default\"} 1",
        "gantry_jobs{queue=\"default\",state=\"running\"} 1",
        "gantry_decisions_total{kind=\"start\"} 1",
        "gantry_scheduling_cycle_seconds_bucket{le=\"+Inf\"}",
        "gantry_job_wait_seconds_count{queue=\"default\"} 1",
        "gantry_jobs{queue=\"default\",state=\"pending\"} 0",
        "gantry_pending_jobs{queue=\"default\",reason=\"resources\"} 0",
        "gantry_http_requests_total{route=\"/v1/jobs\",method=\"POST\",code=\"201\"} 2",
        "gantry_build_info{version=\"",
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
        "gantry_node_ready{node=\"n1\"} 1",
        "gantry_jobs_ended_total{ending=\"cancelled\"} 1",
        "gantry_jobs_ended_total{ending=\"lost\"} 0",
        "gantry_jobs_ended_total{ending=\"completed\"} 0",
        "gantry_idle_events_total{action=\"reclaim\"} 0",
        "model_name=\"NVIDIA A100-SXM4-80GB\",simulated=\"true\"} 0.",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "text 0.0.4 has neither: {text}");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').expect("name and value");
        assert!(name.starts_with("gantry_") || name.starts_with("process_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    let client = gantry_wire::client::Client::new(&server.url, &Default::default()).expect("client");
    let accept = [("Accept", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")];
    let (_, open) = client.request_with(Some(&server.token), "GET", "/metrics", None, &accept).expect("scrape");
    assert!(open.ends_with("# EOF\n") && open.contains("# TYPE gantry_jobs_ended counter\n"), "{open}");
    let (status, _) = request(&server.url, None, "GET", "/metrics", None).expect("scrape");
    assert_eq!(status, 401, "metrics need a token");
    server.stop();
}

/// Idle hoarding: a job under the threshold is flagged; where its queue reclaims, a
/// preemptible one is stopped and ends cancelled, and so is an interactive one even when not
/// preemptible; a non-preemptible batch job is only flagged.
#[test]
fn idle_jobs_are_flagged_and_reclaimed_where_the_queue_says() {
    use gantry_server::idle::{IdleAction, IdlePolicy};
    // Simulated utilization is 55–94 %: under a 100 % threshold every job is idle at once.
    let policy = IdlePolicy {
        threshold_pct: 100,
        after_minutes: 0,
        action: IdleAction::Notify,
        queues: [("default".to_string(), IdleAction::Reclaim)].into(),
    };
    let server = Server::with_idle("idle", policy);
    let ids = server.submit(
        "[[job]]\nname = \"hoarder\"\ngpu = { count = 1 }\ncommand = \"sleep 30\"\ngrace = \"1s\"\n\n\
         [[job]]\nname = \"precious\"\ngpu = { count = 1 }\npreemptible = false\ncommand = \"sleep 3\"\n\n\
         [[job]]\nname = \"notebook\"\ngpu = { count = 1 }\npreemptible = false\ninteractive = true\n\
         command = \"sleep 30\"\ngrace = \"1s\"\n",
    );
    server.wait_for(ids[0], JobState::Cancelled);
    server.wait_for(ids[1], JobState::Completed);
    server.wait_for(ids[2], JobState::Cancelled);
    let (status, events) = server.call("GET", "/v1/idle", None);
    assert_eq!(status, 200, "{events}");
    let actions: Vec<(u64, &str)> = events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| (e["job"].as_u64().expect("job"), e["action"].as_str().expect("action")))
        .collect();
    assert_eq!(actions, [(ids[0], "reclaim"), (ids[1], "notify"), (ids[2], "reclaim")], "{events}");
    let (_, text) = request(&server.url, Some(&server.token), "GET", "/metrics", None).expect("scrape");
    assert!(text.contains("gantry_idle_events_total{action=\"reclaim\"} 2"), "{text}");
    server.stop();
}

/// `GET /v1/plan`: the online planner's advice for the jobs waiting and running — here, an
/// eighth 1g.10gb job waits for a MIG slice, and the idle whole GPU should become a MIG GPU.
/// Advice only: the fleet is unchanged afterwards.
#[test]
fn the_planner_advises_reconfiguring_an_idle_gpu_for_waiting_mig_jobs() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-plan", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let fleet = "[[node]]\nname = \"n1\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n\
                 [[node.gpu]]\nindex = 0\nmig = [\"1g.10gb@0\", \"1g.10gb@1\", \"1g.10gb@2\", \"1g.10gb@3\", \"1g.10gb@4\", \"1g.10gb@5\", \"1g.10gb@6\"]\n";
    let server = Server::start_full(data, gantry_engine::sched::SchedulerConfig::default(), fleet);
    let ids = server.submit(
        "[[job]]\nname = \"infer\"\ncount = 8\ngpu = { mig = \"1g.10gb\" }\ngrace = 1\ncommand = \"sleep 30\"\n",
    );
    for id in &ids[..7] {
        server.wait_for(*id, JobState::Running);
    }
    assert_eq!(server.state(ids[7]).0, JobState::Pending);
    let (status, plan) = server.call("GET", "/v1/plan", None);
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["demand_tasks"], 8, "{plan}");
    let changes = plan["reconfigure"].as_array().expect("list");
    assert_eq!(changes.len(), 1, "{plan}");
    assert_eq!((changes[0]["node"].as_str(), changes[0]["gpu"].as_u64()), (Some("n1"), Some(1)), "{plan}");
    assert_eq!(changes[0]["from"], "whole");
    assert!(changes[0]["to"].as_str().expect("mode").starts_with("mig 1g.10gb@0"), "{plan}");
    // Advice only: GPU 1 is still whole.
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    assert_eq!(nodes[0]["gpus"][1]["mode"], "whole", "{nodes}");
    for id in &ids {
        server.call("DELETE", &format!("/v1/jobs/{id}"), None);
    }
    for id in &ids {
        server.wait_for(*id, JobState::Cancelled);
    }
    server.stop();
}

/// `reconfigure = "auto"` on a live service with its in-process agents: a MIG job no GPU is
/// carved for is accepted, an idle GPU is reconfigured for it by the controller — ordered to
/// the node's agent, applied to its simulated MIG hardware (`fake-mig.json` in the node's
/// directory), recorded — and the job starts on it; the change is listed with its reason, to
/// admins and members (who see only their queues' jobs), never to an agent token.
#[test]
fn auto_reconfiguration_carves_an_idle_gpu_for_a_waiting_mig_job_on_a_live_service() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-auto", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let fleet =
        "[[node]]\nname = \"n1\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";
    let policy = gantry_server::control::reconfig::ReconfigurePolicy {
        mode: gantry_server::control::reconfig::ReconfigureMode::Auto,
        period_s: 10,
        ..Default::default()
    };
    let local = gantry_server::control::Agents::Local;
    let server = Server::start_config(data.clone(), Default::default(), fleet, local, move |c| c.reconfigure = policy);
    let ids =
        server.submit("[[job]]\nname = \"infer\"\ngpu = { mig = \"2g.20gb\" }\ngrace = 1\ncommand = \"sleep 30\"\n");
    server.wait_for(ids[0], JobState::Running);
    let (status, view) = server.call("GET", "/v1/reconfigurations", None);
    assert_eq!(status, 200, "{view}");
    assert_eq!((view["mode"].as_str(), view["applied"].as_u64()), (Some("auto"), Some(1)), "{view}");
    let r = &view["recent"][0];
    assert_eq!(r["phase"], "applied", "{view}");
    assert_eq!(r["serves"], serde_json::json!([ids[0]]), "{view}");
    // The simulated hardware has the layout the controller records.
    let hardware =
        std::fs::read_to_string(data.join("nodes/n1/fake-mig.json")).expect("the node's simulated MIG state");
    assert!(hardware.contains("2g.20gb"), "{hardware}");
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    let gpu = r["gpu"].as_u64().expect("gpu") as usize;
    assert_eq!(nodes[0]["gpus"][gpu]["mode"], "mig", "{nodes}");
    // An agent token may not read it; a member of another queue sees no job ids.
    let agent = server.agent_token();
    assert_eq!(server.call_as(Some(&agent), "GET", "/v1/reconfigurations", None).0, 403);
    let (status, member) =
        server.call("POST", "/v1/tokens", Some(r#"{"name": "bob", "role": "member", "queues": ["other"]}"#));
    assert_eq!(status, 201, "{member}");
    let (_, seen) = server.call_as(member["secret"].as_str(), "GET", "/v1/reconfigurations", None);
    assert_eq!(seen["recent"][0]["serves"], serde_json::json!([]), "{seen}");
    assert!(!seen["recent"][0]["reason"].as_str().unwrap_or_default().contains(&ids[0].to_string()), "{seen}");
    let (_, metrics) = request(&server.url, Some(&server.token), "GET", "/metrics", None).expect("scrape");
    assert!(metrics.contains("gantry_reconfigurations_total{outcome=\"applied\"} 1"), "{metrics}");
    server.call("DELETE", &format!("/v1/jobs/{}", ids[0]), None);
    server.wait_for(ids[0], JobState::Cancelled);
    server.stop();
}

#[test]
fn a_mig_job_no_gpu_is_carved_for_yet_waits_for_a_layout_and_the_planner_proposes_it() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-carve", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    // Both GPUs whole: no MIG instance exists anywhere yet.
    let fleet =
        "[[node]]\nname = \"n1\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";
    let server = Server::start_full(data, gantry_engine::sched::SchedulerConfig::default(), fleet);
    // Refused as before: a profile no GPU model here offers, and a MIG job too big for any node.
    for (body, expected) in [
        ("[[job]]\nname = \"a30\"\ngpu = { mig = \"1g.6gb\" }\n", "can never run on this fleet"),
        ("[[job]]\nname = \"fat\"\ncpu = 1000\ngpu = { mig = \"2g.20gb\" }\n", "can never run on this fleet"),
    ] {
        let (status, reply) = server.call("POST", "/v1/jobs", Some(body));
        assert_eq!(status, 400, "{reply}");
        assert!(reply["error"].as_str().unwrap_or_default().contains(expected), "{reply}");
    }
    // Accepted: the profile exists on this model, the GPUs are just not laid out for it.
    let ids =
        server.submit("[[job]]\nname = \"infer\"\ncount = 2\ngpu = { mig = \"2g.20gb\" }\ncommand = \"sleep 30\"\n");
    for id in &ids {
        // The reason is the first cycle's after the submission (the reply does not wait for it).
        let deadline = Instant::now() + Duration::from_secs(20);
        let (state, why) = loop {
            let (state, why) = server.state(*id);
            if why["pending"]["reason"]["reasons"][0]["reason"]["reason"].is_string() || Instant::now() > deadline {
                break (state, why);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(state, JobState::Pending, "{why}");
        let reason = &why["pending"]["reason"]["reasons"][0]["reason"];
        assert_eq!(
            (reason["reason"].as_str(), reason["profile"].as_str()),
            (Some("mig-not-supported"), Some("2g.20gb"))
        );
        // The job's own view names the GPU that would be carved for it, and who does it.
        let layout = &why["layout"];
        assert_eq!((layout["node"].as_str(), layout["busy"].as_bool()), (Some("n1"), Some(false)), "{why}");
        let message = layout["message"].as_str().expect("message");
        assert!(
            message
                .starts_with(&format!("waiting for GPU {} on node n1 to be reconfigured (whole → mig ", layout["gpu"]))
                && message.contains("gantry mig apply"),
            "{message}"
        );
    }
    let (status, plan) = server.call("GET", "/v1/plan", None);
    assert_eq!(status, 200, "{plan}");
    let changes = plan["reconfigure"].as_array().expect("list");
    assert_eq!(changes.len(), 1, "one GPU holds both instances: {plan}");
    assert_eq!(changes[0]["from"], "whole", "{plan}");
    assert!(changes[0]["to"].as_str().expect("mode").contains("2g.20gb"), "{plan}");
    for id in &ids {
        server.call("DELETE", &format!("/v1/jobs/{id}"), None);
        server.wait_for(*id, JobState::Cancelled);
    }
    server.stop();
}

/// `gantry mig apply` (or nvidia-smi) on a node, then its agent registers again: an idle GPU
/// takes the layout the hardware has — recorded, so a restart keeps it under the task that
/// runs there — and a waiting MIG job starts on it; a busy GPU's disagreement is refused.
#[test]
fn an_agents_mig_layout_is_taken_on_idle_gpus_and_kept_across_restarts() {
    let server = Server::remote("adopt");
    let agent = server.agent_token();
    let ids = server.submit("[[job]]\nname = \"infer\"\ngpu = { mig = \"3g.40gb\" }\ncommand = \"sleep 600\"\n");
    let register = |body: &str| server.call_as(Some(&agent), "POST", "/v1/agents/register", Some(body));
    let mode_of_gpu0 = |server: &Server| server.call("GET", "/v1/nodes", None).1[0]["gpus"][0]["mode"].clone();
    let mig = r#"{"node": "n1", "gpus": [{"index": 0, "uuid": "GPU-a", "model": "A100-SXM4-80GB", "mig_mode": true, "mig": [{"profile": "3g.40gb", "start": 4, "gpu_instance_id": 2}, {"profile": "3g.40gb", "start": 0, "gpu_instance_id": 1}]}, {"index": 1, "uuid": "GPU-b", "model": "A100-SXM4-80GB", "mig_mode": false}]}"#;
    // A layout the catalog forbids is refused, and nothing is taken.
    let (status, reply) = register(&mig.replace(r#""start": 4"#, r#""start": 2"#));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("does not allow"), "{reply}");
    assert_eq!(mode_of_gpu0(&server), "whole");
    // The hardware's layout is taken: the waiting job starts on an instance of it.
    let (status, reply) = register(mig);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(mode_of_gpu0(&server), "mig");
    // The driver's instance ids the agent read label the instances, as DCGM's GPU_I_ID does.
    let instances = server.call("GET", "/v1/nodes", None).1[0]["gpus"][0]["instances"].clone();
    assert_eq!((&instances[0]["start"], &instances[0]["gpu_instance_id"]), (&0.into(), &1.into()), "{instances}");
    let (_, metrics) = request(&server.url, Some(&server.token), "GET", "/metrics", None).expect("scrape");
    assert!(metrics.contains("GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"2\",start=\"4\"}"), "{metrics}");
    server.wait_for(ids[0], JobState::Running);
    let (_, job) = server.call("GET", &format!("/v1/jobs/{}", ids[0]), None);
    assert_eq!(job["tasks"][0]["placement"]["gpus"][0]["kind"], "mig", "{job}");
    // GPU 0 is busy now: an agent that finds it whole again is refused.
    let (status, reply) = register(&mig.replace(
        r#""mig_mode": true, "mig": [{"profile": "3g.40gb", "start": 4, "gpu_instance_id": 2}, {"profile": "3g.40gb", "start": 0, "gpu_instance_id": 1}]"#,
        r#""mig_mode": false"#,
    ));
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("with work on it"), "{reply}");
    // A restart keeps the layout (the fleet file still says whole) and the job on its instance.
    let data = server.stop();
    let agents = gantry_server::control::Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    let server = Server::start_agents(data, gantry_engine::sched::SchedulerConfig::default(), FLEET, agents);
    assert_eq!(mode_of_gpu0(&server), "mig");
    assert_eq!(server.state(ids[0]).0, JobState::Running);
    server.call("DELETE", &format!("/v1/jobs/{}", ids[0]), None);
    server.stop();
}

/// `Idempotency-Key` over REST: a repeated submission is answered with its jobs (and makes
/// none); a malformed key is a 400 and stores nothing.
#[test]
fn a_submission_repeated_with_its_idempotency_key_is_not_doubled() {
    let server = Server::new("idempotency");
    let client = gantry_wire::client::Client::new(&server.url, &Default::default()).expect("client");
    let body = "[[job]]\nname = \"once\"\ncommand = \"true\"\n";
    let submit = |key: &str| {
        let (status, text) = client
            .request_with(Some(&server.token), "POST", "/v1/jobs", Some(body), &[("Idempotency-Key", key)])
            .expect("answers");
        (status, serde_json::from_str::<Value>(&text).expect("json"))
    };
    let (status, first) = submit("3f2a-retry-me");
    assert_eq!(status, 201, "{first}");
    assert_eq!(submit("3f2a-retry-me"), (201, first.clone()), "the same jobs again");
    for bad in ["has space", &"k".repeat(129), ""] {
        let (status, reply) = submit(bad);
        assert_eq!(status, 400, "{bad:?}: {reply}");
        assert!(reply["error"].as_str().expect("error").contains("Idempotency-Key"), "{reply}");
    }
    let (_, jobs) = server.call("GET", "/v1/jobs?state=pending,running,completed", None);
    assert_eq!(jobs.as_array().expect("list").len(), 1, "one job in all: {jobs}");
    server.stop();
}
