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
        Self::register_speaking(server, node, 3)
    }

    fn register_speaking(server: &'s Server, node: &'static str, protocol: u32) -> FakeAgent<'s> {
        let body = format!(r#"{{"name": "agent-{node}", "role": "agent", "node": "{node}"}}"#);
        let (status, made) = server.call("POST", "/v1/tokens", Some(&body));
        assert_eq!(status, 201, "{made}");
        let token = made["secret"].as_str().expect("secret").to_string();
        let reg = format!(
            r#"{{"node": "{node}", "gpus": [{{"index": 0, "uuid": "GPU-{node}", "model": "L4-24GB"}}], "protocol": {protocol}, "instance": "i-{node}"}}"#
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

impl FakeAgent<'_> {
    /// Answer an output read as this node's agent.
    fn answer(&self, chunk: &gantry_wire::LogChunk) -> (u16, Value) {
        let body = serde_json::to_string(chunk).expect("json");
        self.server.call_as(Some(&self.token), "POST", &format!("/v1/agents/{}/logs", self.node), Some(&body))
    }

    /// Heartbeats until one carries an output read (or gives up): the reads.
    fn reads(&self) -> Vec<gantry_wire::LogRead> {
        for _ in 0..100 {
            let (_, orders) = self.beat(&[], 100);
            let reads: Vec<gantry_wire::LogRead> =
                serde_json::from_value(orders["log_reads"].clone()).unwrap_or_default();
            if !reads.is_empty() {
                return reads;
            }
        }
        Vec::new()
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

#[test]
fn a_token_given_a_lifetime_stops_working_when_it_ends() {
    let server = Server::new("trust-expiry");
    let listed = |server: &Server| server.call("GET", "/v1/tokens", None).1;
    let before = listed(&server);
    // Out of bounds: refused, nothing stored.
    for lifetime in ["0", "59", "315360001", "-5", "\"30d\""] {
        let body = format!(r#"{{"name": "ci", "role": "read-only", "expires_in_s": {lifetime}}}"#);
        let (status, answer) = server.call("POST", "/v1/tokens", Some(&body));
        assert_eq!(status, 400, "{lifetime}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    assert_eq!(listed(&server), before, "nothing stored");
    let (status, made) =
        server.call("POST", "/v1/tokens", Some(r#"{"name": "ci", "role": "read-only", "expires_in_s": 2592000}"#));
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().expect("secret").to_string();
    let ci = listed(&server).as_array().expect("list").iter().find(|t| t["name"] == "ci").cloned().expect("listed");
    let now = gantry_server::now_s();
    let expires = ci["expires_at_s"].as_u64().expect("an expiry");
    assert!((now + 2_592_000 - 5..=now + 2_592_000).contains(&expires), "{ci}");
    assert_eq!(server.call_as(Some(&secret), "GET", "/v1/jobs", None).0, 200, "it works for now");
    // A month later (its expiry moved into the past in the store, as time would): refused,
    // after a restart as before it.
    let data = server.stop();
    {
        use gantry_store::Store;
        let mut store = gantry_store::SqliteStore::open(&data.join("gantry.db")).expect("opens");
        let mut record = store.tokens().expect("reads").into_iter().find(|t| t.name == "ci").expect("kept");
        assert_eq!(record.expires_at_s, Some(expires), "the store keeps the expiry");
        assert!(store.revoke_token("ci").expect("rewrites"));
        record.expires_at_s = Some(now - 1);
        store.put_token(&record).expect("rewrites");
    }
    let server = Server::start_in(data);
    let (status, answer) = server.call_as(Some(&secret), "GET", "/v1/jobs", None);
    assert_eq!(status, 401, "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("\"ci\" expired")), "{answer}");
    assert_eq!(server.call("GET", "/v1/jobs", None).0, 200, "the admin's token does not expire");
    server.stop();
}

/// A reader's `GET /v1/jobs/{id}/logs?…` on a thread of its own (it waits for the agent).
fn read_logs(server: &Server, id: u64, query: &str) -> std::thread::JoinHandle<(u16, String)> {
    let (url, token) = (server.url.clone(), server.token.clone());
    let path = format!("/v1/jobs/{id}/logs?{query}");
    std::thread::spawn(move || gantry_wire::client::request(&url, Some(&token), "GET", &path, None).expect("answers"))
}

#[test]
fn output_reads_go_to_the_tasks_node_and_only_its_answer_counts() {
    let server = remote_two_nodes("output");
    let agents = [FakeAgent::register_speaking(&server, "n1", 4), FakeAgent::register_speaking(&server, "n2", 4)];
    let id = server.submit("[[job]]\nname = \"talk\"\ngpu = { count = 1 }\n")[0];
    let owner = (0..50)
        .find_map(|_| {
            agents.iter().position(|a| a.beat(&[], 100).1["launch"].as_array().is_some_and(|l| !l.is_empty()))
        })
        .expect("a launch");
    let (owner, other) = (&agents[owner], &agents[1 - owner]);
    assert_eq!(owner.beat(&[task(id, "running")], 0).0, 200);
    let reader = read_logs(&server, id, "stream=out&format=json");
    let reads = owner.reads();
    assert_eq!(reads.len(), 1, "the task's node is asked");
    let read = &reads[0];
    assert_eq!((read.job, read.rank, read.stream, read.offset), (id, 0, gantry_wire::LogStream::Out, None));
    assert!(read.max_bytes <= gantry_wire::LOG_READ_BYTES_MAX);
    assert!(other.beat(&[], 0).1["log_reads"].is_null(), "the other node is not asked");
    // The other node answers it: refused, and the reader still waits for the real one.
    let forged = gantry_wire::LogChunk::new(read.id, 0, 6, b"forged");
    let (status, reply) = other.answer(&forged);
    assert_eq!(status, 403, "{reply}");
    // The owner answers with more than was asked: refused too.
    let flood = gantry_wire::LogChunk::new(read.id, 0, 1 << 30, &vec![b'x'; read.max_bytes as usize + 1]);
    assert_eq!(owner.answer(&flood).0, 400);
    let garbled = gantry_wire::LogChunk { data: "%%%".into(), ..gantry_wire::LogChunk::new(read.id, 0, 1, b"") };
    assert_eq!(owner.answer(&garbled).0, 400);
    // An oversized body is cut off before it is read.
    let huge = format!(r#"{{"id": {}, "offset": 0, "size": 0, "data": "{}"}}"#, read.id, "A".repeat(1 << 20));
    // A 413, or, when the server stops reading before the client has sent it all and the
    // answer is lost with the connection, the client's error saying why.
    let path = format!("/v1/agents/{}/logs", owner.node);
    match gantry_wire::client::request(&server.url, Some(&owner.token), "POST", &path, Some(&huge)) {
        Ok((status, text)) => assert_eq!(status, 413, "{text}"),
        Err(e) => assert!(e.to_string().contains("over the controller's limit"), "{e}"),
    }
    let (status, reply) = owner.answer(&gantry_wire::LogChunk::new(read.id, 0, 6, b"hello\n"));
    assert_eq!((status, reply["delivered"].clone()), (200, Value::Bool(true)), "{reply}");
    let (status, text) = reader.join().expect("reader");
    assert_eq!(status, 200, "{text}");
    let view: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(view["pieces"][0]["text"], "hello\n", "{view}");
    assert_eq!((view["pieces"][0]["node"].as_str(), view["pieces"][0]["end"].as_u64()), (Some(owner.node), Some(6)));
    // Late or repeated answers change nothing.
    let (status, reply) = owner.answer(&gantry_wire::LogChunk::new(read.id, 0, 6, b"again\n"));
    assert_eq!((status, reply["delivered"].clone()), (200, Value::Bool(false)));
    // A member of another team: refused before any node is asked.
    let bob = member_of(&server, "bob", "default");
    let (status, _) = server.call_as(Some(&bob), "GET", &format!("/v1/jobs/{id}/logs"), None);
    assert_eq!(status, 403);
    // Odd queries: JSON 400s; a task the job does not have: 404.
    for query in ["offset=5", "stream=both", "format=xml", "tail=-1", "offset=1&task=main/0&stream=out&tail=3", "x=1"] {
        let (status, reply) = server.call("GET", &format!("/v1/jobs/{id}/logs?{query}"), None);
        assert_eq!(status, 400, "{query}: {reply}");
        assert!(reply["error"].is_string(), "{query}: {reply}");
    }
    let (status, reply) = server.call("GET", &format!("/v1/jobs/{id}/logs?task=main/7"), None);
    assert!(status == 404 && reply["error"].as_str().is_some_and(|e| e.contains("main/0")), "{reply}");
    assert_eq!(server.state(id).0, JobState::Running, "nothing changed the job");
    server.stop();
}

#[test]
fn an_agent_too_old_for_output_reads_is_named_not_waited_for() {
    let server = remote_two_nodes("output-old");
    let agents = [FakeAgent::register(&server, "n1"), FakeAgent::register(&server, "n2")];
    let id = server.submit("[[job]]\nname = \"talk\"\ngpu = { count = 1 }\n")[0];
    assert!(
        (0..50).any(|_| agents.iter().any(|a| a.beat(&[], 100).1["launch"].as_array().is_some_and(|l| !l.is_empty())))
    );
    let started = std::time::Instant::now();
    let (status, text) = read_logs(&server, id, "").join().expect("reader");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("speaks protocol 3, older than output reads (4): upgrade it"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "no wait for an agent that cannot answer");
    server.stop();
}

/// Heartbeat entries in the command log of the store in `data`.
fn logged_heartbeats(data: &std::path::Path) -> usize {
    use gantry_store::Store;
    let store = gantry_store::SqliteStore::open(&data.join("gantry.db")).expect("opens");
    let log = store.commands_after(0, 1_000_000).expect("reads");
    log.iter().filter(|c| c.body.contains("\"command\":\"heartbeat\"")).count()
}

#[test]
fn a_flooding_node_is_paced_and_what_changes_nothing_is_not_logged() {
    let server = remote_two_nodes("flood");
    let agent = FakeAgent::register_speaking(&server, "n1", 4);
    // As fast as it can: junk about tasks nobody runs, different every time.
    let started = std::time::Instant::now();
    let (mut accepted, mut paced) = (0u64, 0u64);
    for round in 0..400u64 {
        let state = if round % 2 == 0 { "lost" } else { "exited" };
        let junk: Vec<String> = (0..500).map(|i| task(1_000_000 + round * 1_000 + i, state)).collect();
        // Utilization that moves every time, too.
        let body = format!(
            r#"{{"tasks": [{}], "samples": [{{"index": 0, "utilization_pct": {}, "memory_used_mib": 1, "measured": true}}], "wait_ms": 0, "instance": "i-n1"}}"#,
            junk.join(","),
            round % 100
        );
        let (status, reply) = server.call_as(Some(&agent.token), "POST", "/v1/agents/n1/heartbeat", Some(&body));
        match status {
            200 => accepted += 1,
            429 => {
                assert_eq!(reply["limit"], "heartbeats_per_second", "{reply}");
                paced += 1;
            }
            other => panic!("{other}: {reply}"),
        }
    }
    let took = started.elapsed().as_secs_f64();
    let allowed =
        f64::from(gantry_server::rate::HEARTBEAT_BURST) + took * f64::from(gantry_server::rate::HEARTBEATS_PER_S);
    assert!((accepted as f64) <= allowed + 1.0, "{accepted} accepted in {took:.1} s");
    assert!(paced > 0, "the flood was paced");
    let (_, metrics) = server.call("GET", "/metrics", None);
    let metrics = metrics.as_str().expect("text").to_string();
    // Only the first figures are taken in (more would come a minute later): one entry.
    let unlogged = accepted - 1;
    assert!(metrics.contains(&format!("gantry_heartbeats_total{{logged=\"false\"}} {unlogged}")), "{metrics}");
    let data = server.stop();
    assert_eq!(logged_heartbeats(&data), 1, "junk changed nothing, so nothing of it is in the log");
}

#[test]
fn checkpoints_keep_the_log_bounded_and_the_fleet_running() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-trust-checkpoint", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let agents = gantry_server::control::Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    // Keep nothing before the newest checkpoint; the loop's own checkpoints are an hour away.
    let log = gantry_server::retention::LogRetention { checkpoint_every_s: Some(3600), keep_s: Some(0) };
    let server = Server::start_config(data, Default::default(), TWO_NODES, agents, move |c| c.log = log);
    let fleet = [FakeAgent::register(&server, "n1"), FakeAgent::register(&server, "n2")];
    // Launches each node's agent has been told about and runs.
    let mut runs: [Vec<u64>; 2] = Default::default();
    let beat_all = |runs: &mut [Vec<u64>; 2]| {
        for _ in 0..3 {
            for (i, agent) in fleet.iter().enumerate() {
                let tasks: Vec<String> = runs[i].iter().map(|&j| task(j, "running")).collect();
                let (status, orders) = agent.beat(&tasks, 0);
                assert_eq!(status, 200, "an agent keeps its link across checkpoints: {orders}");
                for launch in orders["launch"].as_array().into_iter().flatten() {
                    let job = launch["job"].as_u64().expect("job");
                    if !runs[i].contains(&job) {
                        runs[i].push(job);
                    }
                }
            }
        }
    };
    let first = server.submit("[[job]]\nname = \"a\"\ngpu = { count = 1 }\n")[0];
    beat_all(&mut runs);
    assert_eq!(server.state(first).0, JobState::Running);
    // A member may not checkpoint.
    let bob = member_of(&server, "bob", "default");
    assert_eq!(server.call_as(Some(&bob), "POST", "/v1/checkpoint", None).0, 403);
    let (status, reply) = server.call("POST", "/v1/checkpoint", None);
    assert_eq!((status, reply["taken"].clone(), reply["keep_log_s"].clone()), (200, Value::Bool(true), Value::from(0)));
    // The fleet goes on: a second job lands on the free node, the first ends when its node says.
    let second = server.submit("[[job]]\nname = \"b\"\ngpu = { count = 1 }\n")[0];
    beat_all(&mut runs);
    assert_eq!(server.state(second).0, JobState::Running);
    let owner = runs.iter().position(|r| r.contains(&first)).expect("placed");
    runs[owner].retain(|&j| j != first);
    assert_eq!(fleet[owner].beat(&[task(first, "exited")], 0).0, 200);
    assert_eq!(server.state(first).0, JobState::Completed);
    beat_all(&mut runs);
    let (status, reply) = server.call("POST", "/v1/checkpoint", None);
    assert_eq!((status, reply["taken"].clone()), (200, Value::Bool(true)), "{reply}");
    let third = server.submit("[[job]]\nname = \"c\"\ngpu = { count = 1 }\n")[0];
    beat_all(&mut runs);
    assert_eq!(server.state(third).0, JobState::Running);
    let data = server.stop();
    // The log before the last checkpoint is gone; what is kept replays exactly from there.
    use gantry_store::Store;
    let store = gantry_store::SqliteStore::open(&data.join("gantry.db")).expect("opens");
    let kept = store.commands_after(0, 1_000_000).expect("reads");
    assert!(kept[0].seq > 1 && kept[0].body.contains("\"carried\""), "the kept log begins at the checkpoint");
    assert!(!kept.iter().any(|c| c.body.contains("\"command\":\"create-token\"")), "older entries are deleted");
    let report = gantry_server::replay::replay(&store, gantry_catalog::Catalog::embedded()).expect("replays");
    assert_eq!(report.first_difference, None, "{report:?}");
    assert!(report.events_before > 0 && report.starts >= 1, "{report:?}");
    let jobs = store.jobs(&[]).expect("jobs");
    assert_eq!(jobs.len(), 3, "no job is deleted with the log");
}
