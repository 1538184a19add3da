//! The controller trusts no node beyond its grant (issue 36), tried as a hostile node would
//! against a controller with remote agents speaking the wire protocol over HTTP.

use crate::Server;
use gantry_types::JobState;
use serde_json::Value;

const TWO_NODES: &str = "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n\n\
                         [[node]]\nname = \"n2\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n";

fn remote_two_nodes(tag: &str) -> Server {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-trust-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let agents = gantry_server::control::Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    Server::start_agents(data, Default::default(), TWO_NODES, agents)
}

/// A node's agent, registered with its own token.
struct FakeAgent<'s> {
    server: &'s Server,
    node: &'static str,
    token: String,
}

impl<'s> FakeAgent<'s> {
    fn register(server: &'s Server, node: &'static str) -> FakeAgent<'s> {
        let body = format!(r#"{{"name": "agent-{node}", "role": "agent", "node": "{node}"}}"#);
        let (status, made) = server.call("POST", "/v1/tokens", Some(&body));
        assert_eq!(status, 201, "{made}");
        let token = made["secret"].as_str().expect("secret").to_string();
        let reg = format!(
            r#"{{"node": "{node}", "gpus": [{{"index": 0, "uuid": "GPU-{node}", "model": "L4-24GB"}}], "protocol": 3, "instance": "i-{node}"}}"#
        );
        let (status, reply) = server.call_as(Some(&token), "POST", "/v1/agents/register", Some(&reg));
        assert_eq!(status, 200, "{reply}");
        FakeAgent { server, node, token }
    }

    /// One heartbeat reporting `tasks` (JSON objects): its status and answer.
    fn beat(&self, tasks: &[String], wait_ms: u64) -> (u16, Value) {
        let body =
            format!(r#"{{"tasks": [{}], "wait_ms": {wait_ms}, "instance": "i-{}"}}"#, tasks.join(","), self.node);
        self.server.call_as(Some(&self.token), "POST", &format!("/v1/agents/{}/heartbeat", self.node), Some(&body))
    }
}

fn task(job: u64, state: &str) -> String {
    let end = match state {
        "exited" => r#", "code": 0, "timed_out": false"#,
        _ => "",
    };
    format!(r#"{{"job": {job}, "group": "main", "replica": 0, "attempt": 0, "state": "{state}"{end}}}"#)
}

#[test]
fn a_node_speaks_only_for_its_own_tasks() {
    let server = remote_two_nodes("own-tasks");
    let agents = [FakeAgent::register(&server, "n1"), FakeAgent::register(&server, "n2")];
    let id = server.submit("[[job]]\nname = \"mine\"\ngpu = { count = 1 }\n")[0];
    // Whichever node the job was placed on gets its launch.
    let owner = (0..50)
        .find_map(|_| {
            agents.iter().position(|a| a.beat(&[], 100).1["launch"].as_array().is_some_and(|l| !l.is_empty()))
        })
        .expect("a launch");
    let (owner, other) = (&agents[owner], &agents[1 - owner]);
    assert_eq!(owner.beat(&[task(id, "running")], 0).0, 200);
    // The other node says the task ended, then that it was lost: neither counts.
    for state in ["exited", "lost"] {
        let (status, reply) = other.beat(&[task(id, state)], 0);
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["forget"], serde_json::json!([]), "not acknowledged: {reply}");
        assert_eq!(server.state(id).0, JobState::Running, "a report by {} about {}'s task", other.node, owner.node);
    }
    let (_, nodes) = server.call("GET", "/v1/nodes", None);
    let refused = |name: &str| {
        nodes.as_array().and_then(|n| n.iter().find(|n| n["name"] == name)).map(|n| n["refused_reports"].clone())
    };
    assert_eq!(refused(other.node), Some(Value::from(2)), "{nodes}");
    assert_eq!(refused(owner.node), Some(Value::Null), "{nodes}");
    // An oversized heartbeat is refused whole, naming its limit; nothing in it counts.
    let flood: Vec<String> = (0..10_001).map(|j| task(1_000_000 + j, "lost")).collect();
    let (status, reply) = other.beat(&flood, 0);
    assert_eq!(status, 413, "{reply}");
    assert_eq!(reply["limit"], "heartbeat_task_reports", "{reply}");
    // The node that runs it is believed.
    let (_, done) = owner.beat(&[task(id, "exited")], 0);
    assert_eq!(done["forget"][0]["job"], id, "{done}");
    assert_eq!(server.state(id).0, JobState::Completed);
    server.stop();
}

/// A member's token for `queue`.
fn member_of(server: &Server, name: &str, queue: &str) -> String {
    let body = format!(r#"{{"name": "{name}", "role": "member", "queues": ["{queue}"]}}"#);
    let (status, reply) = server.call("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{reply}");
    reply["secret"].as_str().expect("secret").to_string()
}

#[test]
fn a_member_sees_its_teams_business_only() {
    use gantry_engine::sched::{Order, SchedulerConfig};
    let data = std::env::temp_dir().join(format!("gantry-server-{}-trust-visibility", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let tree = gantry_types::QueueTree::flat(["team-a", "team-b"], 3600, 86_400);
    let server = Server::start_with(data, SchedulerConfig { order: Order::FairShare(tree), ..Default::default() });
    // Alice's job runs as her Unix account: made for the test where it can be (root, as CI).
    let account = crate::isolation::is_root().then(|| crate::isolation::TestUser::new("va"));
    let alice_name = account.as_ref().map_or_else(|| "alice".to_string(), |u| u.0.clone());
    let (alice, carol, bob) = (
        member_of(&server, &alice_name, "team-a"),
        member_of(&server, "carol", "team-a"),
        member_of(&server, "bob", "team-b"),
    );
    let (reader, _) = server.call("POST", "/v1/tokens", Some(r#"{"name": "ro", "role": "read-only"}"#));
    assert_eq!(reader, 201);
    let (_, ro) = server.call("POST", "/v1/tokens", Some(r#"{"name": "ro2", "role": "read-only"}"#));
    let ro = ro["secret"].as_str().expect("secret").to_string();
    let body = "[[job]]\nname = \"secret-run\"\nqueue = \"team-a\"\ngpu = { count = 1 }\nenv = { API_KEY = \"hunter2\" }\ncommand = \"sleep 30\"\n";
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(body));
    assert_eq!(status, 201, "{reply}");
    let id = reply["ids"][0].as_u64().expect("id");
    if account.is_some() {
        server.wait_for(id, JobState::Running);
    }
    // Another team's job, named or numbered, is as unknown to bob as one never submitted.
    let unknown = |after: &str| -> String {
        let body = format!("[[job]]\nname = \"after\"\nqueue = \"team-b\"\nafter = [\"{after}\"]\n");
        let (status, reply) = server.call_as(Some(&bob), "POST", "/v1/jobs", Some(&body));
        assert_eq!(status, 400, "{reply}");
        reply["error"].as_str().expect("error").replace(after, "X")
    };
    assert_eq!(unknown(&id.to_string()), unknown("999999"), "no more said of a hidden job than of a missing one");
    assert_eq!(unknown("secret-run"), unknown("no-such-name"));
    // Its environment's values are its user's and the admins': the names show to the others.
    let env_of = |token: &str| -> Value {
        let (status, job) = server.call_as(Some(token), "GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "{job}");
        job["job"]["run"]["env"].clone()
    };
    assert!(env_of(&alice).to_string().contains("hunter2"), "{}", env_of(&alice));
    assert!(env_of(&server.token).to_string().contains("hunter2"));
    for other in [&carol, &ro] {
        let seen = env_of(other).to_string();
        assert!(seen.contains("API_KEY") && !seen.contains("hunter2"), "{seen}");
    }
    let (_, listed) = server.call_as(Some(&carol), "GET", "/v1/jobs", None);
    assert!(!listed.to_string().contains("hunter2"), "the list hides it too: {listed}");
    // The nodes view names another team's jobs to nobody but admins and read-only tokens.
    let holders = |token: &str| -> Vec<u64> {
        let (_, nodes) = server.call_as(Some(token), "GET", "/v1/nodes", None);
        nodes[0]["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["jobs"].as_array().cloned().unwrap_or_default())
            .filter_map(|j| j.as_u64())
            .collect()
    };
    if account.is_some() {
        assert_eq!(holders(&alice), vec![id]);
        assert_eq!(holders(&bob), Vec::<u64>::new(), "bob sees a GPU in use, not whose");
        assert_eq!(holders(&ro), vec![id]);
        assert_eq!(server.call("DELETE", &format!("/v1/jobs/{id}"), None).0, 200);
        server.wait_for(id, JobState::Cancelled);
    }
    server.stop();
}

#[test]
fn priority_is_granted_by_the_queue_not_chosen_by_a_member() {
    use gantry_engine::sched::{Order, SchedulerConfig};
    let data = std::env::temp_dir().join(format!("gantry-server-{}-trust-priority", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let queues = "[[queue]]\nname = \"team-a\"\npriority = { default = 0, max = 5 }\n\n[[queue]]\nname = \"team-b\"\n";
    let tree = gantry_spec::parse_queues(queues, gantry_catalog::Catalog::embedded()).expect("queue file");
    let config = SchedulerConfig { order: Order::FairShare(tree), preempt: true, ..SchedulerConfig::default() };
    let server = Server::start_with(data, config);
    // Team a's job holds both GPUs (an admin's, at team a's default priority 0; it runs as
    // the controller's account).
    let theirs = server.submit(
        "[[job]]\nname = \"a-run\"\nqueue = \"team-a\"\ngpu = { count = 2 }\ngrace = 1\ncommand = \"sleep 60\"\n",
    )[0];
    server.wait_for(theirs, JobState::Running);
    // A member of team b (the default range: at most 0) names a huge priority: granted 0, and
    // it stops nothing of team a's, cycle after cycle.
    let bob = member_of(&server, "bob", "team-b");
    let body = "[[job]]\nname = \"bob-pushy\"\nqueue = \"team-b\"\npriority = 1000000\ngpu = { count = 1 }\n";
    let (status, reply) = server.call_as(Some(&bob), "POST", "/v1/jobs", Some(body));
    assert_eq!(status, 201, "{reply}");
    let pushy = reply["ids"][0].as_u64().expect("id");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (state, running) = server.state(theirs);
    assert_eq!((state, running["requeues"].clone()), (JobState::Running, Value::from(0)), "{running}");
    let (_, job) = server.call_as(Some(&bob), "GET", &format!("/v1/jobs/{pushy}"), None);
    assert_eq!(job["job"]["priority"], 0, "{job}");
    assert!(
        job["priority_capped"].as_str().is_some_and(|c| c.contains("capped at 0") && c.contains("1000000")),
        "{job}"
    );
    // Team a's operator granted its members up to 5: that is what alice gets.
    let alice = member_of(&server, "alice", "team-a");
    let body = "[[job]]\nname = \"alice-high\"\nqueue = \"team-a\"\npriority = 50\nhold = true\n";
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(body));
    assert_eq!(status, 201, "{reply}");
    let (_, job) = server.call_as(Some(&alice), "GET", &format!("/v1/jobs/{}", reply["ids"][0]), None);
    assert_eq!(job["job"]["priority"], 5, "{job}");
    // A job that names none gets its queue's default; a lower one is always allowed.
    let body = "[[job]]\nname = \"modest\"\nqueue = \"team-a\"\npriority = -3\nhold = true\n";
    let (_, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(body));
    let (_, job) = server.call_as(Some(&alice), "GET", &format!("/v1/jobs/{}", reply["ids"][0]), None);
    assert_eq!((job["job"]["priority"].clone(), job["priority_capped"].clone()), (Value::from(-3), Value::Null));
    // The queue file's range is checked.
    let bad = "[[queue]]\nname = \"q\"\npriority = { default = 9, max = 2 }\n";
    let err = gantry_spec::parse_queues(bad, gantry_catalog::Catalog::embedded()).expect_err("default above max");
    assert!(err.to_string().contains("default 9 is above max 2"), "{err}");
    for id in [pushy, theirs] {
        server.call("DELETE", &format!("/v1/jobs/{id}"), None);
    }
    server.stop();
}

/// What one raw exchange gets back (until the server closes, or 15 s).
fn raw_exchange(url: &str, request: &[u8]) -> (String, std::time::Duration) {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(15))).expect("timeout");
    let started = std::time::Instant::now();
    stream.write_all(request).expect("writes");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
}

#[test]
fn the_http_layer_answers_in_json_and_drops_slow_clients() {
    let server = Server::new("trust-http");
    // hyper's own refusals, before any handler: JSON like every other error.
    let headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    for (request, status) in [
        (b"GARBAGE\r\n\r\n".to_vec(), "400"),
        (format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{headers}\r\n").into_bytes(), "431"),
    ] {
        let (answer, _) = raw_exchange(&server.url, &request);
        assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
        assert!(json["error"].is_string(), "{answer}");
    }
    // A client that never finishes its request's head is dropped, not held for ever.
    let (answer, took) = raw_exchange(&server.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
    assert!(answer.is_empty(), "{answer}");
    let limit = gantry_server::tls::HEADER_READ_TIMEOUT;
    assert!(took >= limit && took < limit + std::time::Duration::from_secs(4), "dropped after {took:?}");
    // And the controller serves on.
    let (answer, _) = raw_exchange(&server.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop();
}
