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
