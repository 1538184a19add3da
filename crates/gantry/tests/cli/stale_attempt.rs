//! Issue 37 §3 with real processes: a node is lost while its task runs (its agent paused), the
//! job is requeued and can only go back to that node; when the agent comes back its old task
//! ignores SIGTERM. The new attempt must not start until the old process is gone: never two
//! attempts of one job on one GPU at once.

use super::*;

/// Is process `pid` gone (or a zombie, which holds no GPU)?
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

#[test]
fn a_requeued_attempt_never_runs_beside_the_old_one_that_ignores_sigterm() {
    let dir = temp_dir("stale-attempt");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let fleet = write_fixture(
        &dir,
        "fleet.toml",
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 1\n",
    );
    let ran = dir.join("ran.log");
    let workload = write_fixture(
        &dir,
        "job.toml",
        &format!(
            "[[job]]\nname = \"stubborn\"\ngpu = {{ count = 1 }}\ngrace = 8\ncommand = \"echo $$ >> {}; trap '' TERM; exec sleep 600\"\n",
            ran.display()
        ),
    );
    let data = dir.join("controller");
    let args = ["serve", "--fleet", &fleet, "--data", &path(&data), "--listen", "127.0.0.1:0"];
    let (_controller, url) = spawn(&[&args[..], &["--agent-timeout", "2", "--node-lost-after", "4"]].concat());
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let out =
        gantry(&["token", "create", "rack", "--role", "agent", "--node", "n1", "--server", &url, "--token", &admin]);
    std::fs::write(dir.join("n1.token"), stdout(&out).lines().next().expect("secret").trim()).expect("token file");
    let agent_args = [
        "agent",
        "--server",
        &url,
        "--token-file",
        &path(&dir.join("n1.token")),
        "--inventory",
        &fleet,
        "--node",
        "n1",
        "--data",
        &path(&dir.join("agent")),
    ];
    let (agent, _) = spawn(&agent_args);
    let out = gantry(&["submit", &workload, "--server", &url, "--token", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let started = |n: usize| -> Option<Vec<String>> {
        let lines: Vec<String> =
            std::fs::read_to_string(&ran).unwrap_or_default().lines().map(str::to_string).collect();
        (lines.len() >= n).then_some(lines)
    };
    let show = || -> serde_json::Value {
        let out = gantry(&["show", "1", "--json", "--server", &url, "--token", &admin]);
        serde_json::from_str(&stdout(&out)).unwrap_or_default()
    };
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}: {}", show());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    wait("the first attempt starts", &|| started(1).is_some());
    let old = started(1).expect("started")[0].clone();
    // The agent goes silent past --node-lost-after: the node is lost, the job requeued.
    let pid = agent.0.id().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().expect("kill").success());
    wait("the job is requeued", &|| show()["requeues"] == 1);
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().expect("kill").success());
    // The agent comes back with attempt 0 alive; it ignores SIGTERM and is killed after its
    // 8 s grace. Attempt 1 may start only once it is gone.
    wait("the second attempt starts", &|| started(2).is_some());
    assert!(gone(&old), "attempt 1 started while attempt 0 (pid {old}) still ran on the GPU");
    let out = gantry(&["cancel", "1", "--server", &url, "--token", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait("the job ends", &|| show()["state"] == "cancelled");
}
