//! Hostile tenants against a running controller: a spoofed user, a flood of jobs in one line,
//! a backlog past its limits, names carrying terminal escapes, bodies that are too large or not
//! text, paths and methods that do not exist. Each is refused with a JSON error naming why (and
//! the limit, for 413 and 429), and nothing is stored.

use crate::{FLEET, Server};
use serde_json::Value;
use std::io::{Read, Write};

/// A controller with small backlog and name limits (the jobs-per-request default kept).
fn limited(name: &str) -> Server {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let local = gantry_server::control::Agents::Local;
    Server::start_config(data, Default::default(), FLEET, local, |c| {
        c.admission.pending_per_user = 3;
        c.admission.pending_per_queue = 5;
        c.admission.name_chars = 16;
    })
}

fn member(server: &Server, name: &str) -> String {
    let body = format!(r#"{{"name": "{name}", "role": "member", "queues": ["default"]}}"#);
    let (status, reply) = server.call("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{reply}");
    reply["secret"].as_str().expect("secret").to_string()
}

fn held(name: &str, user: Option<&str>) -> String {
    let user = user.map(|u| format!("user = \"{u}\"\n")).unwrap_or_default();
    format!("[[job]]\nname = \"{name}\"\nhold = true\n{user}")
}

/// A raw HTTP/1.1 request (the client library only sends text): status and body.
/// `POST /v1/jobs` with these exact bytes; (0, null) when the server closed the connection
/// before the body was sent whole and its answer was lost (what a body over the limit may see).
fn raw(url: &str, token: &str, body: &[u8]) -> (u16, Value) {
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).expect("connects");
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A refused oversized body: the server stops reading, so the write may fail midway.
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
    let mut reply = String::new();
    if stream.read_to_string(&mut reply).is_err() || reply.len() < 12 {
        return (0, Value::Null);
    }
    let status = reply[9..12].parse().expect("a status");
    let json = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(json).unwrap_or(Value::String(json.to_string())))
}

/// A start estimate checks what a submission checks, stores nothing, and is paced per token.
#[test]
fn an_estimate_stores_nothing_and_is_paced() {
    let server = limited("estimate");
    let alice = member(&server, "alice");
    let job = "[[job]]\nname = \"probe\"\ngpu = { count = 1 }\n";
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs/estimate", Some(job));
    assert_eq!(status, 200, "{reply}");
    assert!(reply["start_s"].is_u64() && reply["nodes"].as_array().is_some_and(|n| !n.is_empty()), "{reply}");
    let elsewhere = "[[job]]\nname = \"x\"\nqueue = \"other\"\n";
    let (status, _) = server.call_as(Some(&alice), "POST", "/v1/jobs/estimate", Some(elsewhere));
    assert_eq!(status, 403, "not a member of that queue");
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs/estimate", Some("[[job]\n"));
    assert_eq!(status, 400, "{reply}");
    let (_, listed) = server.call("GET", "/v1/jobs", None);
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "nothing stored: {listed}");
    let paced = (0..40)
        .map(|_| server.call_as(Some(&alice), "POST", "/v1/jobs/estimate", Some(job)).0)
        .filter(|&s| s == 429)
        .count();
    assert!(paced > 0, "a token asking 40 times at once is paced");
}

/// A signal reaches into a job's processes: only its user and admins may send one, only a
/// signal a user may send, only to a running job, and only in a body the API reads.
#[test]
fn only_a_jobs_user_may_signal_it_and_only_with_a_users_signal() {
    let server = limited("signals");
    let (alice, bob) = (member(&server, "alice"), member(&server, "bob"));
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(&held("mine", None)));
    assert_eq!(status, 201, "{reply}");
    let path = format!("/v1/jobs/{}/signal", reply["ids"][0]);
    let usr1 = Some(r#"{"signal": "USR1"}"#);
    let (status, reply) = server.call_as(Some(&bob), "POST", &path, usr1);
    assert_eq!(status, 403, "a queue-mate may not signal another's job: {reply}");
    assert!(reply["error"].as_str().is_some_and(|e| e.contains("only its user and admins")), "{reply}");
    let (status, reply) = server.call_as(Some(&alice), "POST", &path, usr1);
    assert_eq!(status, 409, "a waiting job has no processes: {reply}");
    for body in [r#"{"signal": "SEGV"}"#, r#"{"signal": "USR1", "pid": 1}"#, "USR1", r#"{"signal": 10}"#] {
        let (status, reply) = server.call_as(Some(&alice), "POST", &path, Some(body));
        assert_eq!(status, 400, "{body}: {reply}");
        assert!(reply["error"].is_string(), "{reply}");
    }
    let (status, _) = server.call_as(Some(&alice), "POST", "/v1/jobs/999/signal", usr1);
    assert_eq!(status, 404);
}

#[test]
fn identity_comes_from_the_token_and_only_an_admin_submits_for_another_user() {
    let server = limited("identity");
    let alice = member(&server, "alice");
    let (status, reply) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(&held("spoof", Some("bob"))));
    assert_eq!(status, 403, "{reply}");
    assert!(reply["error"].as_str().expect("error").contains("not as user \"bob\""), "{reply}");
    let (status, mine) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(&held("mine", None)));
    assert_eq!(status, 201, "{mine}");
    let (status, same) = server.call_as(Some(&alice), "POST", "/v1/jobs", Some(&held("same", Some("alice"))));
    assert_eq!(status, 201, "naming herself is fine: {same}");
    let for_bob = server.submit(&held("for-bob", Some("bob")));
    let control = |id: &Value| server.state(id.as_u64().expect("id")).1["job"]["control"].clone();
    assert_eq!(control(&mine["ids"][0])["user"], "alice");
    assert!(control(&mine["ids"][0]).get("submitted_by").is_none());
    let bob = control(&Value::from(for_bob[0]));
    assert_eq!((bob["user"].as_str(), bob["submitted_by"].as_str()), (Some("bob"), Some("admin")));
    let (_, all) = server.call("GET", "/v1/jobs", None);
    assert_eq!(all.as_array().expect("list").len(), 3, "the spoofed job was not stored");
    server.stop();
}

#[test]
fn floods_backlogs_escapes_and_odd_bodies_are_refused_with_json_and_nothing_stored() {
    let server = limited("flood");
    let alice = member(&server, "alice");
    let as_alice = |body: &str| server.call_as(Some(&alice), "POST", "/v1/jobs", Some(body));
    let limit_of = |reply: &Value| (reply["limit"].as_str().map(str::to_string), reply["value"].as_u64());
    // One short line asking for 100,000 jobs: refused before they are built.
    let (status, reply) = as_alice("[[job]]\nname = \"a\"\narray = 100000\nhold = true\n");
    assert_eq!(status, 413, "{reply}");
    assert_eq!(limit_of(&reply), (Some("jobs_per_request".into()), Some(10_000)));
    let (status, reply) = as_alice("[[job]]\nname = \"c\"\ncount = 10001\nhold = true\n");
    assert_eq!((status, limit_of(&reply).0.as_deref()), (413, Some("jobs_per_request")), "{reply}");
    // Names a terminal would act on, and names too long.
    for name in [r"\u001b[2J\u001b[31mowned", r"evil\u202Egnp.exe", r"a\u0007bell", r"tab\there"] {
        let (status, reply) = as_alice(&format!("[[job]]\nname = \"{name}\"\nhold = true\n"));
        assert_eq!(status, 400, "{name}: {reply}");
        assert!(reply["error"].as_str().expect("error").contains("unprintable character"), "{reply}");
    }
    let (status, reply) = as_alice(&held("seventeen-chars-x", None));
    assert_eq!((status, limit_of(&reply)), (413, (Some("name_chars".into()), Some(16))), "{reply}");
    // A backlog: three waiting jobs per user, five per queue.
    let (status, reply) = as_alice("[[job]]\nname = \"w\"\ncount = 3\nhold = true\n");
    assert_eq!(status, 201, "{reply}");
    let (status, reply) = as_alice(&held("one-more", None));
    assert_eq!((status, limit_of(&reply)), (429, (Some("pending_per_user".into()), Some(3))), "{reply}");
    server.submit(&held("for-bob", Some("bob")));
    let (status, reply) =
        server.call("POST", "/v1/jobs", Some("[[job]]\nname = \"x\"\ncount = 2\nuser = \"carol\"\nhold = true\n"));
    assert_eq!((status, limit_of(&reply)), (429, (Some("pending_per_queue".into()), Some(5))), "{reply}");
    // A job that ends frees its place in the backlog.
    let (_, waiting) = server.call_as(Some(&alice), "GET", "/v1/jobs", None);
    let first = waiting[0]["id"].as_u64().expect("id");
    assert_eq!(server.call_as(Some(&alice), "DELETE", &format!("/v1/jobs/{first}"), None).0, 200);
    assert_eq!(as_alice(&held("again", None)).0, 201);
    // Bodies: not UTF-8, too large; unknown paths and methods. All JSON.
    let (status, reply) = raw(&server.url, &alice, b"[[job]]\nname = \"\xff\xfe\"\n");
    assert_eq!(status, 400, "{reply}");
    assert!(reply["error"].as_str().expect("JSON").contains("not UTF-8"), "{reply}");
    // Too large: a 413 naming the limit, unless the answer was lost with the connection.
    let (status, reply) = raw(&server.url, &alice, format!("# {}\n", "x".repeat(2 << 20)).as_bytes());
    if status != 0 {
        assert_eq!((status, limit_of(&reply)), (413, (Some("body_bytes".into()), Some(1 << 20))), "{reply}");
    }
    let (status, reply) = server.call("GET", "/v1/nothing-here", None);
    assert!(status == 404 && reply["error"].as_str().is_some_and(|e| e.contains("no endpoint")), "{reply}");
    let (status, reply) = server.call("PUT", "/v1/jobs", None);
    assert!(status == 405 && reply["error"].as_str().is_some(), "{reply}");
    // Stored: alice's three (one cancelled) and the one after it, bob's one.
    let (_, all) = server.call("GET", "/v1/jobs", None);
    assert_eq!(all.as_array().expect("list").len(), 5, "{all}");
    server.stop();
}

#[test]
fn the_data_directory_the_store_the_token_and_task_logs_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let server = limited("private");
    let id = server.submit("[[job]]\nname = \"talk\"\ncommand = \"echo secret-output\"\n")[0];
    server.wait_for(id, gantry_types::JobState::Completed);
    let mode = |p: &std::path::Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&server.data), 0o700, "the data directory");
    for name in ["gantry.db", "gantry.db-wal", "admin.token"] {
        assert_eq!(mode(&server.data.join(name)), 0o600, "{name}");
    }
    let mut logs = Vec::new();
    let mut stack = vec![server.data.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "out" || e == "err") {
                logs.push(path);
            }
        }
    }
    assert!(!logs.is_empty(), "the task wrote its logs under the data directory");
    for log in &logs {
        assert_eq!(mode(log), 0o600, "{}", log.display());
    }
    server.stop();
}

/// Agent tokens are bound to one node; a live node's agent cannot be displaced by another
/// process holding the same token, while the same agent restarting is welcome.
#[test]
fn an_agent_token_acts_for_its_node_only_and_a_live_agent_is_not_displaced() {
    let server = Server::remote("node-bound");
    let create = |body: &str| server.call("POST", "/v1/tokens", Some(body));
    let (status, reply) = create(r#"{"name": "rack", "role": "agent"}"#);
    assert!(status == 400 && reply["error"].as_str().expect("error").contains("for one node"), "{reply}");
    let (status, reply) = create(r#"{"name": "rack", "role": "agent", "node": "n9"}"#);
    assert!(status == 404 && reply["error"].as_str().expect("error").contains("\"n9\""), "{reply}");
    let (status, reply) = create(r#"{"name": "ops", "role": "read-only", "node": "n1"}"#);
    assert!(status == 400 && reply["error"].as_str().expect("error").contains("agent tokens only"), "{reply}");
    let agent = server.agent_token();
    let register = |token: &str, instance: &str| {
        let body = format!(
            r#"{{"node": "n1", "instance": "{instance}", "gpus": [{{"index": 0, "uuid": "GPU-real-0", "model": "A100-SXM4-80GB"}}, {{"index": 1, "uuid": "GPU-real-1", "model": "A100-SXM4-80GB"}}]}}"#
        );
        server.call_as(Some(token), "POST", "/v1/agents/register", Some(&body))
    };
    let beat = |token: &str, instance: &str| {
        let body = format!(r#"{{"tasks": [], "instance": "{instance}"}}"#);
        server.call_as(Some(token), "POST", "/v1/agents/n1/heartbeat", Some(&body))
    };
    assert_eq!(register(&agent, "first").0, 200);
    assert_eq!(beat(&agent, "first").0, 200);
    // Another process with the same token: neither its registration nor its heartbeats.
    let (status, reply) = register(&agent, "impostor");
    assert!(status == 409 && reply["error"].as_str().expect("error").contains("has a live agent"), "{reply}");
    let (status, reply) = beat(&agent, "impostor");
    assert!(status == 409 && reply["error"].as_str().expect("error").contains("register first"), "{reply}");
    // The same agent again (it restarted): welcome; an admin may take the node over.
    assert_eq!(register(&agent, "first").0, 200);
    assert_eq!(register(&server.token, "replacement").0, 200, "an admin says so");
    assert_eq!(beat(&agent, "first").0, 409, "the replaced agent is refused from now on");
    server.stop();
}

/// The API's manners at its edges: a query string the handler cannot read is answered in JSON
/// (axum's own answer is text), a 401 names the scheme it wants (RFC 9110), and an admin token
/// cannot revoke itself — so a controller always keeps an admin that works.
#[test]
fn query_errors_are_json_a_401_names_bearer_and_a_token_cannot_revoke_itself() {
    let server = limited("api-manners");
    for path in ["/v1/jobs?state=nope", "/v1/jobs?state=", "/v1/series?range=day"] {
        let (status, reply) = server.call("GET", path, None);
        assert_eq!(status, 400, "{path}: {reply}");
        assert!(reply["error"].is_string(), "{path}: {reply}");
    }
    let (status, reply) = server.call("DELETE", "/v1/jobs/1?force=maybe", None);
    assert_eq!((status, reply["field"].as_str()), (400, Some("query")), "{reply}");
    let (status, reply) = server.call("DELETE", "/v1/tokens/admin", None);
    assert_eq!(status, 409, "{reply}");
    assert!(reply["error"].as_str().is_some_and(|e| e.contains("cannot revoke itself")), "{reply}");
    assert_eq!(server.call("GET", "/v1/jobs", None).0, 200, "the admin token still works");
    let host = server.url.trim_start_matches("http://").to_string();
    let mut stream = std::net::TcpStream::connect(&host).expect("connects");
    let request = format!("GET /v1/jobs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("sent");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
    assert!(reply.to_ascii_lowercase().contains("\r\nwww-authenticate: bearer realm=\"gantry\"\r\n"), "{reply}");
}
