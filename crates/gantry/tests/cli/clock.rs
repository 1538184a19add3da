//! Issue 37 §4: a controller's wall clock stepped an hour forward and then two hours back
//! (libfaketime under `gantry serve --local`, its monotonic clock left alone) loses no node,
//! kills or requeues nothing, records no end before its start and charges no hour that did
//! not pass.

use super::*;

/// Debian's libfaketime (tools/install-test-deps.sh installs it).
fn libfaketime() -> String {
    let dir = std::fs::read_dir("/usr/lib").expect("/usr/lib");
    dir.filter_map(Result::ok)
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .map(|p| p.to_str().expect("utf-8").to_string())
        .expect("libfaketime is installed (bash tools/install-test-deps.sh)")
}

fn job(url: &str, admin: &str, id: u64) -> serde_json::Value {
    let out = gantry(&["show", &id.to_string(), "--json", "--server", url, "--token", admin]);
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)))
}

#[test]
fn a_wall_clock_step_loses_kills_and_overcharges_nothing() {
    let dir = temp_dir("clock-step");
    let stamp = dir.join("faketime");
    std::fs::write(&stamp, "+0\n").expect("faketime file");
    let data = dir.join("data");
    let workload = write_fixture(
        &dir,
        "job.toml",
        "[[job]]\nname = \"steady\"\ncommand = \"sleep 8\"\ngpu = { count = 1 }\ntime_limit = \"10m\"\n",
    );
    let lib = libfaketime();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME_TIMESTAMP_FILE", stamp.to_str().expect("utf-8")),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let (_server, url) =
        spawn_with(&["serve", "--local", "--listen", "127.0.0.1:0", "--data", data.to_str().expect("utf-8")], &env);
    let admin = std::fs::read_to_string(data.join("admin.token")).expect("admin token").trim().to_string();
    let out = gantry(&["submit", &workload, "--server", &url, "--token", &admin]);
    assert!(out.status.success(), "{}", stderr(&out));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while job(&url, &admin, 1)["state"] != "running" {
        assert!(std::time::Instant::now() < deadline, "{}", job(&url, &admin, 1));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for step in ["+1h", "-1h"] {
        std::fs::write(&stamp, format!("{step}\n")).expect("steps the clock");
        // A few ticks and heartbeats under the stepped clock.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let row = job(&url, &admin, 1);
        assert_eq!(
            (row["state"].as_str(), row["requeues"].as_u64()),
            (Some("running"), Some(0)),
            "after {step}: {row}"
        );
        let out = gantry(&["nodes", "--json", "--server", &url, "--token", &admin]);
        let nodes: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("nodes");
        assert!(nodes.as_array().expect("list").iter().all(|n| n["lost"] != true), "after {step}: {nodes}");
    }
    while job(&url, &admin, 1)["state"] != "completed" {
        assert!(std::time::Instant::now() < deadline, "{}", job(&url, &admin, 1));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let row = job(&url, &admin, 1);
    let (started, ended) = (row["started_at_s"].as_u64().expect("started"), row["ended_at_s"].as_u64().expect("ended"));
    assert!(started <= ended && ended - started < 60, "ran {started}..{ended}: {row}");
    // Charged for the seconds it ran, not the hour the clock jumped.
    let out = gantry(&["usage", "--by", "job", "--json", "--server", &url, "--token", &admin]);
    let usage: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("usage");
    let hours: f64 = usage.as_array().expect("lines").iter().filter_map(|l| l["allocated_gpu_hours"].as_f64()).sum();
    assert!(hours < 0.05, "{hours} GPU-hours charged for a job of seconds: {usage}");
}
