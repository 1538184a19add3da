//! Slurm's partitions and QOS names against a running controller: a partition is a node set
//! with its own limits, apart from the queue (account) a job is charged to; a QOS is the
//! queue file's name for a priority. Limits refuse with the reason and store nothing.

use crate::Server;
use gantry_engine::sched::{Order, SchedulerConfig};
use gantry_types::JobState;
use serde_json::Value;

const FLEET: &str = "[[node]]\nname = \"g1\"\ncpu = 16\nmemory = \"64GiB\"\nlabels = { \"slurm.partition/gpu\" = \"true\" }\n\
    [node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n\
    [[node]]\nname = \"d1\"\ncpu = 16\nmemory = \"64GiB\"\nlabels = { \"slurm.partition/debug\" = \"true\" }\n\
    [node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\n";

const QUEUES: &str = r#"
[[queue]]
name = "default"
[[queue]]
name = "physics"
[[queue]]
name = "gpu-pool"

[[partition]]
name = "gpu"
default = true
node_selector = { "slurm.partition/gpu" = "true" }
queue = "gpu-pool"
max_time = "1d"
max_nodes = 1

[[partition]]
name = "debug"
node_selector = { "slurm.partition/debug" = "true" }
max_time = "30m"

[[qos]]
name = "interactive"
priority = 500
"#;

fn server() -> Server {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-partitions", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let tree = gantry_spec::parse_queues(QUEUES, gantry_catalog::Catalog::embedded()).expect("queues");
    let config = SchedulerConfig { order: Order::FairShare(tree), ..SchedulerConfig::default() };
    Server::start_full(data, config, FLEET)
}

fn job(server: &Server, id: u64) -> Value {
    server.call("GET", &format!("/v1/jobs/{id}"), None).1
}

#[test]
fn partitions_place_jobs_on_their_nodes_charge_the_account_and_refuse_past_their_limits() {
    let server = server();
    let (status, listed) = server.call("GET", "/v1/partitions", None);
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["partitions"][0]["nodes"], serde_json::json!(["g1"]), "{listed}");
    assert_eq!(listed["partitions"][1]["nodes"], serde_json::json!(["d1"]), "{listed}");
    assert_eq!(listed["qos"], serde_json::json!([{"name": "interactive", "priority": 500}]));

    // Partition and account named: it runs on the partition's node, charged to the account.
    let body = "[[job]]\nname = \"a\"\nqueue = \"physics\"\npartition = \"debug\"\nqos = \"interactive\"\ngpu = { count = 1 }\ncommand = [\"sleep\", \"30\"]\n";
    let (status, reply) = server.call("POST", "/v1/jobs", Some(body));
    assert_eq!(status, 201, "{reply}");
    let id = reply["ids"][0].as_u64().expect("id");
    let shown = server.wait_for(id, JobState::Running);
    assert_eq!(shown["tasks"][0]["node"], "d1", "{shown}");
    assert_eq!((shown["queue"].as_str(), shown["job"]["priority"].as_i64()), (Some("physics"), Some(500)));
    assert_eq!(shown["job"]["control"]["time_limit_s"], 1800, "the partition's MaxTime is its limit");

    // Neither named: the default partition, charged to that partition's queue.
    let (status, reply) = server.call(
        "POST",
        "/v1/jobs",
        Some("[[job]]\nname = \"b\"\ngpu = { count = 1 }\ncommand = [\"sleep\", \"30\"]\n"),
    );
    assert_eq!(status, 201, "{reply}");
    let id = reply["ids"][0].as_u64().expect("id");
    let shown = server.wait_for(id, JobState::Running);
    assert_eq!(
        (shown["queue"].as_str(), shown["job"]["control"]["partition"].as_str()),
        (Some("gpu-pool"), Some("gpu"))
    );
    assert_eq!(shown["tasks"][0]["node"], "g1", "{shown}");

    // Past a limit, an unknown name: refused with the reason, nothing stored.
    for (extra, field, words) in [
        ("partition = \"debug\"\ntime_limit = \"1h\"", "time_limit", "above partition debug's MaxTime of 1800 s"),
        ("partition = \"long\"", "partition", "invalid partition name \"long\" (partitions: gpu, debug)"),
        ("qos = \"high\"", "qos", "invalid QOS \"high\" (QOS names: interactive)"),
        ("[[job.task]]\nname = \"t\"\nreplicas = 2\ndistinct_nodes = true", "nodes", "partition gpu's MaxNodes is 1"),
    ] {
        let (status, reply) = server.call("POST", "/v1/jobs", Some(&format!("[[job]]\nname = \"c\"\n{extra}\n")));
        assert_eq!(status, 400, "{extra}: {reply}");
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{extra}: {reply}");
        assert!(reply["field"].as_str().is_some_and(|f| f.ends_with(field)), "{extra}: {reply}");
    }
    let (_, all) = server.call("GET", "/v1/jobs", None);
    assert_eq!(all.as_array().map(Vec::len), Some(2), "refused jobs stored nothing: {all}");
    assert_eq!(job(&server, 1)["job"]["control"]["qos"], "interactive");
    server.stop();
}
