//! Issue 37 §5 (in part): the store's disk fills up under a running controller (SQLite on a
//! 4 MiB tmpfs, filled by a file beside it). Changes are refused with a 503 naming the disk,
//! reads go on, nothing is lost, and once the file is removed the controller takes changes
//! again by itself, without a restart.

use crate::Server;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Mount a tmpfs of `size` at `dir` (root only); false when this process may not.
fn mount_tmpfs(dir: &std::path::Path, size: &str) -> bool {
    std::fs::create_dir_all(dir).expect("mount point");
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status();
    status.is_ok_and(|s| s.success())
}

#[test]
fn a_full_disk_stops_changes_not_reads_and_space_brings_them_back() {
    let dir = std::env::temp_dir().join(format!("gantry-server-{}-disk-full", std::process::id()));
    if !nix::unistd::Uid::effective().is_root() || !mount_tmpfs(&dir, "4m") {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    }
    let data = dir.join("data");
    let server = Server::start_in(data.clone());
    let first = server.submit("[[job]]\nname = \"before\"\ncommand = \"true\"\n")[0];
    // Fill the disk.
    let filler = dir.join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).expect("filler");
        let chunk = vec![0u8; 64 << 10];
        while file.write_all(&chunk).and_then(|_| file.sync_all()).is_ok() {}
    }
    // Submissions until one is refused for the disk (SQLite may have had free pages left).
    let note = "x".repeat(16 << 10);
    let workload = format!("[[job]]\nname = \"fill\"\ncommand = \"true\"\nenv = {{ NOTE = \"{note}\" }}\n");
    let started = Instant::now();
    let refused = loop {
        assert!(started.elapsed() < Duration::from_secs(60), "the disk never filled");
        match gantry_wire::client::request(&server.url, Some(&server.token), "POST", "/v1/jobs", Some(&workload)) {
            Ok((503, text)) => break text,
            Ok((201, _)) => continue,
            Ok((status, text)) => panic!("{status}: {text}"),
            // The submission whose commit hit the full disk waits for space: its client
            // gives up; the next ones are refused at once.
            Err(_) => continue,
        }
    };
    let reply: Value = serde_json::from_str(&refused).expect("json");
    assert!(reply["error"].as_str().is_some_and(|e| e.contains("disk is full")), "{reply}");
    // Reads go on.
    let (status, jobs) = server.call("GET", "/v1/jobs", None);
    assert_eq!(status, 200, "{jobs}");
    assert!(jobs.as_array().is_some_and(|j| j.iter().any(|j| j["id"] == first)), "{jobs}");
    // Space returns: changes are taken again, without a restart.
    std::fs::remove_file(&filler).expect("frees space");
    let freed = Instant::now();
    let after = loop {
        assert!(freed.elapsed() < Duration::from_secs(15), "changes were not taken again");
        match gantry_wire::client::request(
            &server.url,
            Some(&server.token),
            "POST",
            "/v1/jobs",
            Some("[[job]]\nname = \"after\"\ncommand = \"true\"\n"),
        ) {
            Ok((201, text)) => break serde_json::from_str::<Value>(&text).expect("json"),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let id = after["ids"][0].as_u64().expect("an id");
    assert_eq!(server.state(id).1["name"], "after");
    server.stop();
    // Lazily: the store's last connections close as their threads end.
    let _ = std::process::Command::new("umount").arg("-l").arg(&dir).status();
    let _ = std::fs::remove_dir_all(&dir);
}
