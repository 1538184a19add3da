//! Isolation a shared fleet relies on, tried against a running controller: tasks run as their
//! user's Unix account with a clean environment and cannot read the controller's secrets or
//! another user's files and logs; a user without an account on the node is refused before
//! anything runs; HTTPS from the data directory's CA, client certificates that bind an agent
//! to its node, plain HTTP refused where it is not allowed.
//!
//! The account tests need root (CI runs as root): they create two users with `useradd` and
//! remove them after. Without root they say so and check nothing else.

use crate::{FLEET, Server};
use gantry_server::tls::{AgentCerts, local_ca};
use gantry_types::JobState;
use gantry_wire::client::{Client, Tls};
use serde_json::Value;

/// A Unix account made for one test and removed after.
pub(crate) struct TestUser(pub(crate) String);

impl TestUser {
    pub(crate) fn new(tag: &str) -> TestUser {
        let name = format!("gt{tag}{}", std::process::id() % 100_000);
        // A run killed before its cleanup may have left the account: start from none.
        let _ = std::process::Command::new("userdel").args(["-r", &name]).output();
        let out = std::process::Command::new("useradd").args(["-m", "-s", "/bin/sh", &name]).output().expect("useradd");
        assert!(out.status.success(), "useradd {name}: {}", String::from_utf8_lossy(&out.stderr));
        TestUser(name)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel").args(["-r", &self.0]).output();
    }
}

pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub(crate) fn member(server: &Server, name: &str) -> String {
    let body = format!(r#"{{"name": "{name}", "role": "member", "queues": ["default"]}}"#);
    let (status, reply) = server.call("POST", "/v1/tokens", Some(&body));
    assert_eq!(status, 201, "{reply}");
    reply["secret"].as_str().expect("secret").to_string()
}

pub(crate) fn submit_as(server: &Server, token: &str, name: &str, script: &str) -> u64 {
    let body = format!("[[job]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", {script:?}]\n");
    let (status, reply) = server.call_as(Some(token), "POST", "/v1/jobs", Some(&body));
    assert_eq!(status, 201, "{reply}");
    reply["ids"][0].as_u64().expect("id")
}

pub(crate) fn logs(server: &Server, token: &str, id: u64) -> (u16, String) {
    let (status, reply) = server.call_as(Some(token), "GET", &format!("/v1/jobs/{id}/logs"), None);
    (status, reply.as_str().map_or_else(|| reply.to_string(), str::to_string))
}

#[test]
fn tasks_run_as_their_user_and_cannot_read_secrets_or_each_others_files() {
    if !is_root() {
        eprintln!("skipped: running tasks as other users needs root (CI runs as root)");
        return;
    }
    let (alice, bob) = (TestUser::new("a"), TestUser::new("b"));
    let data = std::env::temp_dir().join(format!("gantry-server-{}-isolation", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = Server::start_config(data, Default::default(), FLEET, gantry_server::control::Agents::Local, |_| {});
    let (alice_token, bob_token) = (member(&server, &alice.0), member(&server, &bob.0));
    let store = server.data.join("gantry.db");
    // Alice leaves a private file in her home and prints a secret; then shows who she is.
    let secret_job = submit_as(
        &server,
        &alice_token,
        "secret",
        "umask 077; echo alice-private > $HOME/private.txt; echo alice-log-secret; id -un; pwd; env",
    );
    server.wait_for(secret_job, JobState::Completed);
    let (status, alice_log) = logs(&server, &alice_token, secret_job);
    assert_eq!(status, 200, "{alice_log}");
    assert!(alice_log.contains(&format!("\n{}\n/home/{}\n", alice.0, alice.0)), "runs as alice, at home: {alice_log}");
    // A clean environment: the controller's own variables (this test's CARGO_*, say) are not there.
    for line in alice_log.lines().filter(|l| l.contains('=') && !l.starts_with("==>")) {
        let key = line.split('=').next().unwrap_or("");
        let allowed = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "SHLVL", "_"].contains(&key)
            || key.starts_with("GANTRY_")
            || key.starts_with("CUDA_")
            || key.starts_with("NVIDIA_")
            // A task's place in its run, for Slurm and torch.distributed (docs/formats.md).
            || key.starts_with("SLURM")
            || ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"].contains(&key);
        assert!(allowed, "{key} leaked into the task's environment: {alice_log}");
    }
    // Bob tries everything he should not read.
    let task_log = server.data.join(format!("nodes/n1/jobs/{secret_job}/0/0.out"));
    let snoop = format!(
        "cat {admin}; cat {store}; cat {log}; cat /home/{alice}/private.txt; ls {data}; echo done",
        admin = server.data.join("admin.token").display(),
        store = store.display(),
        log = task_log.display(),
        alice = alice.0,
        data = server.data.display(),
    );
    let snoop_job = submit_as(&server, &bob_token, "snoop", &snoop);
    server.wait_for(snoop_job, JobState::Completed);
    let (_, bob_log) = logs(&server, &bob_token, snoop_job);
    assert!(bob_log.contains("done"), "{bob_log}");
    assert_eq!(bob_log.matches("Permission denied").count(), 5, "every read refused: {bob_log}");
    assert!(!bob_log.contains(&server.token) && !bob_log.contains("alice-private"), "{bob_log}");
    assert!(!bob_log.contains("alice-log-secret"), "{bob_log}");
    // Nor through the API: a job's logs are its user's and the admins'.
    let (status, reply) = logs(&server, &bob_token, secret_job);
    assert!(status == 403 && reply.contains("only its user and admins"), "{reply}");
    assert!(logs(&server, &server.token, secret_job).1.contains("alice-log-secret"));
    // The task's log files belong to its user, mode 0600.
    let meta = std::fs::metadata(&task_log).expect("log");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let alice_uid = nix::unistd::User::from_name(&alice.0).expect("lookup").expect("exists").uid.as_raw();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (alice_uid, 0o600));
    // A user without an account on the node: refused before anything runs, and told why.
    let ghost_token = member(&server, "gtghost-nobody");
    let ghost_job = submit_as(&server, &ghost_token, "ghost", "echo should-not-run");
    let ended = server.wait_for(ghost_job, JobState::Failed);
    let (_, ghost_log) = logs(&server, &ghost_token, ghost_job);
    assert!(ghost_log.contains("no Unix account \"gtghost-nobody\" on node n1"), "{ghost_log}");
    assert!(!ghost_log.contains("should-not-run"), "{ghost_log}");
    assert_eq!(ended["exit_code"], 126, "{ended}");
    // The job's variables reach its own process only, never as themselves the root monitor
    // that drops to its account (there LD_PRELOAD and friends would run the job's code as
    // root): the monitor carries them under a prefix nothing acts on.
    let body = "[[job]]\nname = \"env\"\nenv = { LD_PRELOAD = \"/nonexistent/evil.so\", MARK = \"job-mark\" }\ncommand = \"echo $MARK; sleep 5\"\n";
    let (status, reply) = server.call_as(Some(&alice_token), "POST", "/v1/jobs", Some(body));
    assert_eq!(status, 201, "{reply}");
    let env_job = reply["ids"][0].as_u64().expect("id");
    server.wait_for(env_job, JobState::Running);
    let pid_file = server.data.join(format!("nodes/n1/jobs/{env_job}/0/0.pid"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pid_file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let wrapper = std::fs::read_to_string(&pid_file).expect("pid file").trim().to_string();
    let environ = std::fs::read(format!("/proc/{wrapper}/environ")).expect("the wrapper's environment");
    let environ = String::from_utf8_lossy(&environ);
    let names: Vec<&str> = environ.split('\0').filter_map(|kv| kv.split_once('=').map(|(k, _)| k)).collect();
    assert!(!names.contains(&"LD_PRELOAD") && !names.contains(&"MARK"), "root monitor got {environ}");
    assert!(names.contains(&"GANTRY_JOB_ENV_LD_PRELOAD"), "carried, inert: {environ}");
    assert!(environ.contains("GANTRY_JOB_ID="), "{environ}");
    server.wait_for(env_job, JobState::Completed);
    assert!(logs(&server, &alice_token, env_job).1.contains("job-mark"), "the task itself has its variables");
    // A member named root would run as root: refused at the token.
    let (status, reply) =
        server.call("POST", "/v1/tokens", Some(r#"{"name": "root", "role": "member", "queues": ["default"]}"#));
    assert!(status == 400 && reply["error"].as_str().expect("error").contains("as root"), "{reply}");
    server.stop();
}

/// A controller on HTTPS from its data directory's CA, remote agents, agent certificates
/// `required` or not.
fn tls_server(name: &str, agent_certs: AgentCerts) -> (Server, String, std::path::PathBuf) {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    gantry_server::runner::private_dir(&data).expect("data dir");
    let ca = local_ca(&data, &["127.0.0.1".into()], agent_certs).expect("CA");
    let agents = gantry_server::control::Agents::Remote { heartbeat_timeout_s: 30, node_lost_after_s: 300 };
    let setup = ca.setup.clone();
    let server = Server::start_config(data, Default::default(), FLEET, agents, move |c| c.tls = Some(setup));
    let url = server.url.replace("http://", "https://");
    (server, url, ca.ca_file)
}

fn client(url: &str, ca: &std::path::Path, cert: Option<(&std::path::Path, &str)>) -> Client {
    let client_cert = cert.map(|(dir, node)| (dir.join(format!("{node}.pem")), dir.join(format!("{node}.key"))));
    Client::new(url, &Tls { ca: Some(ca.to_path_buf()), client_cert, ..Tls::default() }).expect("client")
}

fn write_agent_cert(data: &std::path::Path, node: &str) -> std::path::PathBuf {
    let (cert, key) = gantry_server::tls::issue_agent_cert(data, node).expect("issued");
    let dir = data.join("agent-certs");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join(format!("{node}.pem")), cert).expect("cert");
    std::fs::write(dir.join(format!("{node}.key")), key).expect("key");
    dir
}

/// n1's agent token, created over HTTPS.
fn agent_token(server: &Server, https: &Client) -> String {
    let body = r#"{"name": "rack", "role": "agent", "node": "n1"}"#;
    let (status, text) = https.request(Some(&server.token), "POST", "/v1/tokens", Some(body)).expect("answers");
    assert_eq!(status, 201, "{text}");
    let reply: Value = serde_json::from_str(&text).expect("JSON");
    reply["secret"].as_str().expect("secret").to_string()
}

const REGISTER_N1: &str = r#"{"node": "n1", "instance": "i1", "gpus": [{"index": 0, "uuid": "GPU-0", "model": "A100-SXM4-80GB"}, {"index": 1, "uuid": "GPU-1", "model": "A100-SXM4-80GB"}]}"#;

#[test]
fn https_with_the_data_directorys_ca_and_agent_certificates_bound_to_their_node() {
    let (server, url, ca) = tls_server("tls-optional", AgentCerts::Optional);
    let agent = agent_token(&server, &client(&url, &ca, None));
    let certs = write_agent_cert(&server.data, "n1");
    write_agent_cert(&server.data, "n2");
    // The CLI's way in: the CA verifies the controller.
    let (status, _) = client(&url, &ca, None).request(Some(&server.token), "GET", "/v1/jobs", None).expect("https");
    assert_eq!(status, 200);
    // Another CA (a fresh one in another directory): the handshake fails, with a hint.
    let elsewhere = std::env::temp_dir().join(format!("gantry-server-{}-other-ca", std::process::id()));
    let _ = std::fs::remove_dir_all(&elsewhere);
    gantry_server::runner::private_dir(&elsewhere).expect("dir");
    let other = local_ca(&elsewhere, &["127.0.0.1".into()], AgentCerts::Optional).expect("other CA");
    let refused = client(&url, &other.ca_file, None).request(None, "GET", "/v1/jobs", None).expect_err("wrong CA");
    assert!(refused.to_string().contains("invalid peer certificate"), "{refused}");
    // Plain HTTP to the TLS port: a JSON 400 that says what to do.
    let (status, text) = gantry_wire::client::request(&server.url, None, "GET", "/v1/jobs", None).expect("answers");
    let reply: Value = serde_json::from_str(&text).expect("JSON");
    assert!(status == 400 && reply["error"].as_str().expect("error").contains("HTTPS only"), "{reply}");
    // An agent with n2's certificate cannot act as n1; with n1's it can; without one too
    // (certificates are optional here).
    let as_n2 = client(&url, &ca, Some((&certs, "n2")));
    let (status, text) =
        as_n2.request(Some(&agent), "POST", "/v1/agents/register", Some(REGISTER_N1)).expect("answers");
    assert!(status == 403 && text.contains("is not for node"), "{text}");
    let as_n1 = client(&url, &ca, Some((&certs, "n1")));
    let (status, text) =
        as_n1.request(Some(&agent), "POST", "/v1/agents/register", Some(REGISTER_N1)).expect("answers");
    assert_eq!(status, 200, "{text}");
    let (status, text) = as_n2
        .request(Some(&agent), "POST", "/v1/agents/n1/heartbeat", Some(r#"{"tasks": [], "instance": "i1"}"#))
        .expect("answers");
    assert_eq!(status, 403, "{text}");
    server.stop();
    let _ = std::fs::remove_dir_all(elsewhere);
}

#[test]
fn required_agent_certificates_refuse_an_agent_without_one() {
    let (server, url, ca) = tls_server("tls-required", AgentCerts::Required);
    let agent = agent_token(&server, &client(&url, &ca, None));
    let certs = write_agent_cert(&server.data, "n1");
    let bare = client(&url, &ca, None);
    let (status, text) = bare.request(Some(&agent), "POST", "/v1/agents/register", Some(REGISTER_N1)).expect("answers");
    assert!(status == 401 && text.contains("gantry cert agent n1"), "{text}");
    // The CLI needs no certificate: only agents do.
    assert_eq!(bare.request(Some(&server.token), "GET", "/v1/jobs", None).expect("answers").0, 200);
    let with = client(&url, &ca, Some((&certs, "n1")));
    assert_eq!(with.request(Some(&agent), "POST", "/v1/agents/register", Some(REGISTER_N1)).expect("answers").0, 200);
    server.stop();
}

#[test]
fn plain_http_off_loopback_needs_insecure_http() {
    let data = std::env::temp_dir().join(format!("gantry-server-{}-plain-off-loopback", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let fleet = gantry_spec::parse_fleet(FLEET, gantry_catalog::Catalog::embedded()).expect("fleet");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let config = crate::config_for(data.clone(), fleet, |c| c.listen = "0.0.0.0:0".parse().expect("addr"));
    let Err(refused) = rt.block_on(gantry_server::start(config)) else { panic!("plain HTTP on 0.0.0.0 started") };
    assert!(refused.to_string().contains("--insecure-http"), "{refused}");
    let _ = std::fs::remove_dir_all(data);
}
